//! Packing at compile time (`kiln compile --pack`, spec/iree.md "Packed at
//! compile time"): iree-compile reads the weights of the matrix products
//! from the export's archive, packs them into its CPU kernels' tile layout
//! while it compiles, and writes the packed weights to a second archive,
//! which the module reads under the scope [`PACKED_SCOPE`]. kiln then
//! stores each distinct packed tensor once ([`share_duplicates`]): the
//! prefill and decode functions of a KV module get two identical entries
//! for every weight, and a runtime that maps the archive holds their bytes
//! once. Nothing is packed at load.

use crate::graph::{Graph, GraphError, Module, Node, Op, Value};
use crate::params::irpa::{EntrySpec, IrpaReader, IrpaWriter};
use crate::params::{ParamsError, TensorWriter};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The parameter scope of a packed archive in the module.
pub const PACKED_SCOPE: &str = "packed";

/// The packed archive of a module compiled with `--pack`: the module's
/// path with `.packed.irpa` in place of `.vmfb`
/// (`NAME-kv-host.vmfb` → `NAME-kv-host.packed.irpa`). kiln's runners
/// (`kiln run`, `generate`, `chat`, the tests) pass it, when it exists,
/// under [`PACKED_SCOPE`].
pub fn packed_archive(vmfb: &Path) -> PathBuf {
    let name = vmfb
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".vmfb").unwrap_or(&name);
    vmfb.with_file_name(format!("{stem}.packed.irpa"))
}

/// Whether every use of node `i` ends in a product operand through
/// conversions, reshapes and transposes (and there is at least one use).
fn to_dots(i: usize, nodes: &[Node], users: &[Vec<usize>]) -> bool {
    !users[i].is_empty() && users[i].iter().all(|&u| on_product_path(u, nodes, users))
}

/// Whether node `u`, as a user, leads only to products: a `dot_general`,
/// or a conversion, reshape, transpose or block widening
/// ([`Op::DequantizeBlocks`], the `keep`, `q8_0` and `q4_0` matrices) whose
/// every use does.
fn on_product_path(u: usize, nodes: &[Node], users: &[Vec<usize>]) -> bool {
    match nodes[u].op {
        Op::DotGeneral(_) => true,
        Op::Convert | Op::Reshape | Op::Transpose { .. } | Op::DequantizeBlocks(_) => {
            to_dots(u, nodes, users)
        }
        _ => false,
    }
}

/// Each node's users, by index.
fn users_of(g: &Graph) -> Vec<Vec<usize>> {
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); g.nodes().len()];
    for (i, n) in g.nodes().iter().enumerate() {
        for a in &n.args {
            users[a.index()].push(i);
        }
    }
    users
}

/// The keys of the whole-entry parameters whose every use, in every
/// function, reaches a `dot_general` operand through element conversions,
/// reshapes, transposes and block widenings only: the weights IREE packs
/// for its matrix kernels (a block-quantized matrix's codes, scales and
/// minimums are packed as the f32 matrix they widen to), in the module's
/// order. A parameter that is also gathered, sliced, or used elementwise (a
/// norm, a per-row scale) is left out: imported, its raw bytes would be compiled into the
/// module. ([`split_products`] first gives a tied embedding's products a key
/// of their own.)
pub fn packable_keys(module: &Module) -> Vec<String> {
    let mut ok: HashMap<&str, bool> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for g in &module.functions {
        let nodes = g.nodes();
        let users = users_of(g);
        for (i, n) in nodes.iter().enumerate() {
            if let Op::Parameter { key, offset } = &n.op {
                // A row-chunk slice is left out: iree-compile 3.13 crashes
                // importing one (SIGSEGV in `raw_inplace_ostream::write_impl`).
                let good = offset.is_none() && to_dots(i, nodes, &users);
                match ok.get_mut(key.as_str()) {
                    Some(v) => *v &= good,
                    None => {
                        ok.insert(key, good);
                        order.push(key);
                    }
                }
            }
        }
    }
    // A block widening is packed whole or not at all: were only some of
    // its parts imported, they would be compiled into the module as
    // constants and the widening still made at load.
    let mut changed = true;
    while changed {
        changed = false;
        for g in &module.functions {
            let nodes = g.nodes();
            for n in nodes {
                if !matches!(n.op, Op::DequantizeBlocks(_)) {
                    continue;
                }
                let roots: Vec<Option<&str>> =
                    n.args.iter().map(|a| root_key(a.index(), nodes)).collect();
                let whole = roots.iter().all(|r| r.is_some_and(|k| ok[k]));
                if !whole {
                    for k in roots.into_iter().flatten() {
                        if let Some(v) = ok.get_mut(k) {
                            changed |= std::mem::replace(v, false);
                        }
                    }
                }
            }
        }
    }
    order
        .into_iter()
        .filter(|k| ok[k])
        .map(str::to_string)
        .collect()
}

/// The key of the whole-entry parameter node `i` reads, through
/// conversions, reshapes and transposes; `None` for anything else.
fn root_key(i: usize, nodes: &[Node]) -> Option<&str> {
    match &nodes[i].op {
        Op::Parameter { key, offset: None } => Some(key),
        Op::Convert | Op::Reshape | Op::Transpose { .. } => {
            root_key(nodes[i].args[0].index(), nodes)
        }
        _ => None,
    }
}

/// The suffix of the key [`split_products`] gives a parameter's products.
pub const PRODUCTS_SUFFIX: &str = "#products";

/// A module whose products read split keys, and the (new key, original key)
/// pairs ([`split_products`]).
pub type Split = (Module, Vec<(String, String)>);

/// `module` with each whole-entry parameter that feeds both products and
/// other ops (a tied embedding: gathered, and the LM head), directly or
/// through conversions and reshapes (a block table's f16 scales, widened
/// once for both), read under a second key, `KEY#products`, on its product
/// paths: the same bytes, so the products' side becomes packable while the
/// gather keeps reading `KEY`.
/// Returns the module and the (new key, original key) pairs; `None` when no
/// parameter is split.
pub fn split_products(module: &Module) -> Result<Option<Split>, GraphError> {
    let mut split: Vec<(String, String)> = Vec::new();
    let mut out = module.clone();
    out.functions.clear();
    for f in &module.functions {
        let nodes = f.nodes();
        let users = users_of(f);
        // Whole-entry parameters, or conversions, reshapes or transposes of
        // one (an f16 scale widened once for a gather and a product), with
        // both kinds of use.
        let mixed: Vec<bool> = (0..nodes.len())
            .map(|i| {
                root_key(i, nodes).is_some()
                    && !to_dots(i, nodes, &users)
                    && users[i].iter().any(|&u| on_product_path(u, nodes, &users))
            })
            .collect();
        if !mixed.iter().any(|&m| m) {
            out.functions.push(f.clone());
            continue;
        }
        let mut g = Graph::new(f.name.clone());
        let mut map: Vec<Value> = Vec::with_capacity(nodes.len());
        // The products' copy of each chain node, once made.
        let mut second: HashMap<usize, Value> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let v = match &n.op {
                Op::Input { .. } => g.input(n.ty.clone()),
                op => {
                    let product_path = n.args.iter().any(|a| mixed[a.index()])
                        && on_product_path(i, nodes, &users);
                    let mut args = Vec::with_capacity(n.args.len());
                    for a in &n.args {
                        let ai = a.index();
                        if mixed[ai] && product_path {
                            args.push(products_copy(ai, nodes, &mut g, &mut second, &mut split)?);
                        } else {
                            args.push(map[ai]);
                        }
                    }
                    g.push(op.clone(), &args, n.ty.clone())
                }
            };
            map.push(v);
        }
        g.set_outputs_as(f, &map)?;
        out.functions.push(g);
    }
    Ok((!split.is_empty()).then_some((out, split)))
}

/// The products' copy of chain node `i` ([`split_products`]): its parameter
/// read under `KEY#products`, then the same conversions and reshapes.
fn products_copy(
    i: usize,
    nodes: &[Node],
    g: &mut Graph,
    second: &mut HashMap<usize, Value>,
    split: &mut Vec<(String, String)>,
) -> Result<Value, GraphError> {
    if let Some(&v) = second.get(&i) {
        return Ok(v);
    }
    let n = &nodes[i];
    let v = match &n.op {
        Op::Parameter { key, .. } => {
            let new_key = format!("{key}{PRODUCTS_SUFFIX}");
            if !split.iter().any(|(k, _)| *k == new_key) {
                split.push((new_key.clone(), key.clone()));
            }
            g.parameter(&new_key, n.ty.clone())?
        }
        op => {
            let a = products_copy(n.args[0].index(), nodes, g, second, split)?;
            g.push(op.clone(), &[a], n.ty.clone())
        }
    };
    second.insert(i, v);
    Ok(v)
}

/// Writes `out`, an archive of the `(new key, original key)` pairs of
/// [`split_products`]: each new key with the bytes of its original in
/// `archive`, for iree-compile to import beside it.
pub(crate) fn write_split_archive(
    archive: &Path,
    pairs: &[(String, String)],
    out: &Path,
) -> Result<(), ParamsError> {
    let reader = IrpaReader::open(archive)?;
    let mut specs = Vec::new();
    let mut data = Vec::new();
    for (new_key, key) in pairs {
        let bytes = reader
            .get(key)
            .ok_or_else(|| ParamsError::NotFound {
                file: archive.to_path_buf(),
                tensor: key.clone(),
            })?
            .expand()
            .map_err(|_| {
                ParamsError::io(
                    archive,
                    std::io::Error::new(std::io::ErrorKind::OutOfMemory, key.clone()),
                )
            })?;
        specs.push(EntrySpec::data(new_key.clone(), bytes.len() as u64));
        data.push((new_key, bytes));
    }
    let mut w = IrpaWriter::new(out, specs)?;
    for (k, b) in data {
        w.write_tensor(k, &b)?;
    }
    w.finish()?;
    Ok(())
}

/// What [`share_duplicates`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shared {
    /// Entries in the archive.
    pub entries: usize,
    /// Entries that read another entry's bytes.
    pub shared: usize,
    /// Bytes stored.
    pub stored: u64,
    /// Bytes the entries cover (stored once per entry).
    pub covered: u64,
}

/// Rewrites the archive `src` (iree-compile's export) into `dst`, in kiln's
/// layout (the entries in `src`'s order), storing each distinct byte string
/// once: an entry whose bytes equal an earlier entry's reads that entry's
/// storage ([`EntrySpec::shared`]). `dst` is written to a temporary file
/// and renamed into place.
pub fn share_duplicates(src: &Path, dst: &Path) -> Result<Shared, ParamsError> {
    use crate::params::irpa::{EntryKind, IrpaData};
    use sha2::{Digest, Sha256};
    let reader = IrpaReader::open(src)?;
    let entries = reader.entries();
    let bytes_of = |i: usize| match reader.data(&entries[i]) {
        IrpaData::Data(d) => d,
        IrpaData::Splat { .. } => &[],
    };
    let mut specs = Vec::new();
    let mut first: HashMap<[u8; 32], Vec<usize>> = HashMap::new();
    let mut stored = Vec::new();
    let mut shared = Shared {
        entries: 0,
        shared: 0,
        stored: 0,
        covered: 0,
    };
    for (i, e) in entries.iter().enumerate() {
        match &e.kind {
            EntryKind::Skip => continue,
            EntryKind::Splat { length, pattern } => {
                specs.push(EntrySpec::splat(e.name.clone(), pattern, *length));
            }
            EntryKind::Data { length, .. } => {
                let bytes = bytes_of(i);
                let same = first.entry(Sha256::digest(bytes).into()).or_default();
                // Same hash: compare the bytes too.
                match same.iter().find(|&&j| bytes_of(j) == bytes) {
                    Some(&j) => {
                        specs.push(EntrySpec::shared(
                            e.name.clone(),
                            entries[j].name.clone(),
                            *length,
                        ));
                        shared.shared += 1;
                    }
                    None => {
                        same.push(i);
                        specs.push(EntrySpec::data(e.name.clone(), *length));
                        stored.push(i);
                        shared.stored += length;
                    }
                }
            }
        }
        shared.entries += 1;
        shared.covered += e.len();
    }
    let mut w = IrpaWriter::new(dst, specs)?;
    for i in stored {
        w.write_tensor(&entries[i].name, bytes_of(i))?;
    }
    w.finish()?;
    Ok(shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_archive_sits_beside_the_module() {
        assert_eq!(
            packed_archive(Path::new("out/m-kv-host.vmfb")),
            Path::new("out/m-kv-host.packed.irpa")
        );
    }
}
