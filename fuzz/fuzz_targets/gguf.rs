//! Any input must either be rejected with an error or yield tensors whose
//! bytes stay in bounds and dequantize without panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = kiln::params::gguf::GgufFile::from_bytes("fuzz", data.to_vec()) {
        for (_, v) in g.metadata() {
            let _ = v.to_string();
        }
        for t in g.tensors() {
            assert_eq!(g.tensor_data(t).len() as u64, t.nbytes);
            if t.numel() < 1 << 16 {
                let _ = g.dequantize(t);
            }
        }
    }
});
