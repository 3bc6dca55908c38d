//! Any input must either be rejected with an error or yield views that stay
//! in bounds.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(st) = kiln::params::safetensors::SafeTensors::from_bytes("fuzz", data.to_vec()) {
        for t in st.tensors() {
            let n: u64 = t.shape.iter().product();
            assert_eq!(n * t.dtype.size() as u64, t.data.len() as u64);
            if t.data.len() < 1 << 16 {
                let _ = t.to_f32();
            }
        }
    }
});
