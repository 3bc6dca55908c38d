//! Decode time of a kiln KV pair on local-task with the session's
//! `SCHED_BATCH` policy and without it (`SessionOptions::sched_batch`), in
//! interleaved rounds in one process: spec/iree.md, "The session's
//! scheduling policy". Each round opens the module on a fresh thread (IREE's
//! workers inherit that thread's policy), prefills 64 ids and decodes to
//! the last position; it prints each round and the medians, in ms/token.
//!
//! ```sh
//! cargo run --release -p kiln-runtime --example sched_policy -- \
//!     OUT/NAME-kv-host.vmfb OUT/NAME.irpa OUT/NAME.json [ROUNDS]
//! ```
//!
//! A module from `kiln compile --pack` also reads its packed archive
//! (`NAME-kv-host.packed.irpa`, scope `packed`). `scripts/bench/runtime.sh`
//! runs it.

use kiln_runtime::{
    CacheType, Device, ElementType, KvPair, ParamFile, ParamMode, Session, SessionOptions,
};
use std::path::PathBuf;
use std::time::Instant;

/// What one round needs: the module, its archives and its KV pair.
#[derive(Clone)]
struct Pair {
    vmfb: PathBuf,
    irpa: PathBuf,
    prefill: String,
    decode: String,
    caches: Vec<CacheType>,
    prompt_len: usize,
    max_context: usize,
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [vmfb, irpa, manifest, rest @ ..] = args.as_slice() else {
        return Err("usage: sched_policy VMFB IRPA EXPORT_MANIFEST [ROUNDS]".into());
    };
    let rounds: usize = rest.first().map_or(Ok(5), |r| r.parse())?;
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(manifest)?)?;
    let name = m["name"].as_str().ok_or("the manifest has no name")?;
    let kv = &m["kv"];
    let shape: Vec<usize> = kv["cache_shape"]
        .as_array()
        .ok_or("the manifest has no kv.cache_shape")?
        .iter()
        .map(|d| d.as_u64().map(|d| d as usize).ok_or("a cache dimension"))
        .collect::<std::result::Result<_, _>>()?;
    let element = kv["cache_dtype"]
        .as_str()
        .and_then(ElementType::from_name)
        .ok_or("the manifest has no known kv.cache_dtype")?;
    let sets = kv["cache_count"].as_u64().unwrap_or(1) as usize;
    let pair = Pair {
        vmfb: vmfb.into(),
        irpa: irpa.into(),
        prefill: format!("{name}_prefill"),
        decode: format!("{name}_decode"),
        caches: vec![CacheType { element, shape }; 2 * sets],
        prompt_len: kv["prompt_len"].as_u64().ok_or("kv.prompt_len")? as usize,
        max_context: kv["max_context"].as_u64().ok_or("kv.max_context")? as usize,
    };
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 1..=rounds {
        for (k, batch) in [true, false].into_iter().enumerate() {
            let p = pair.clone();
            let ms = std::thread::spawn(move || decode_ms(&p, batch))
                .join()
                .map_err(|_| "a round panicked")??;
            println!("round {round} sched_batch={batch}: {ms:.2} ms/token");
            times[k].push(ms);
        }
    }
    let [on, off] = times.map(median);
    println!(
        "median: SCHED_BATCH {on:.2} ms/token, default policy {off:.2} ms/token ({:.2}×)",
        off / on
    );
    Ok(())
}

/// One round: open, prefill, decode to the last position; ms per decode.
fn decode_ms(p: &Pair, batch: bool) -> Result<f64> {
    let mut options = SessionOptions::new(Device::LocalTask)
        .sched_batch(batch)
        .param(ParamFile::new("model", &p.irpa, ParamMode::Map));
    let packed = p.vmfb.with_extension("packed.irpa");
    if packed.is_file() {
        options = options.param(ParamFile::new("packed", packed, ParamMode::Map));
    }
    let session = Session::open(&p.vmfb, &options)?;
    let mut kv = KvPair::new(
        session,
        &[(p.prefill.clone(), p.decode.clone())],
        p.caches.clone(),
    )?;
    kv.reset()?;
    let ids: Vec<i32> = (0..p.prompt_len as i32)
        .map(|i| 1000 + 37 * i % 9000)
        .collect();
    let mut token = kv.prefill(0, &ids, 0, p.prompt_len as i32)?.id;
    let t0 = Instant::now();
    let steps = p.max_context - p.prompt_len;
    for position in p.prompt_len..p.max_context {
        token = kv.decode(0, token, position as i32)?.id;
    }
    Ok(t0.elapsed().as_secs_f64() * 1000.0 / steps as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
