//! Any input must either be rejected with an error or yield entries whose
//! data and splats stay in bounds.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = kiln::params::irpa::IrpaReader::from_bytes("fuzz", data.to_vec()) {
        for e in r.entries() {
            let d = r.data(e);
            if e.len() < 1 << 16 {
                assert_eq!(d.expand().unwrap().len() as u64, e.len());
            }
            let _ = e.described();
        }
    }
});
