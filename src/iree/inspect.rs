//! What a compiled module declares, read from the `.vmfb` with IREE's own
//! `iree-dump-module`: its exported functions with their tensor
//! signatures, and every parameter its initializer loads (scope, key,
//! byte range). `kiln verify` checks these against a manifest and an
//! archive.

use super::{IreeError, Result, Toolchain};
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// One exported function: its name and the tensor types of its inputs and
/// outputs, as IREE's ABI declaration states them (`tensor<1x8xi32>`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct FunctionSignature {
    /// The function's name.
    pub name: String,
    /// Input types, in order.
    pub inputs: Vec<String>,
    /// Output types, in order.
    pub outputs: Vec<String>,
}

/// One byte range the module's initializer reads from a parameter.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ParameterRead {
    /// The scope the archive is opened under (`model`).
    pub scope: String,
    /// The parameter's key (the tensor name).
    pub key: String,
    /// First byte read, from the start of the parameter's data.
    pub offset: u64,
    /// Bytes read.
    pub length: u64,
}

impl FunctionSignature {
    /// The function `name` with these input and output types.
    pub fn new(name: &str, inputs: Vec<String>, outputs: Vec<String>) -> Self {
        FunctionSignature {
            name: name.to_string(),
            inputs,
            outputs,
        }
    }
}

impl ParameterRead {
    /// One past the last byte read: the parameter must be at least this long.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.length)
    }
}

/// What a `.vmfb` declares.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ModuleInfo {
    /// Exported functions other than IREE's own `__init`, in module order.
    pub functions: Vec<FunctionSignature>,
    /// Every parameter range the initializer loads, in load order.
    pub parameters: Vec<ParameterRead>,
    /// The executable formats the module carries (`embedded-elf-arm_64`,
    /// `embedded-elf-x86_64`, `vulkan-spirv-fb`, …), each once, in order:
    /// what `__init` names when the device supports none of them.
    pub formats: Vec<String>,
}

impl ModuleInfo {
    /// The exported function named `name`.
    pub fn function(&self, name: &str) -> Option<&FunctionSignature> {
        self.functions.iter().find(|f| f.name == name)
    }
}

/// Reads `vmfb`'s exported functions and parameter loads with
/// `iree-dump-module` (its metadata and the disassembly of `__init`).
pub fn inspect_module(tc: &Toolchain, vmfb: &Path) -> Result<ModuleInfo> {
    let tool = tc.dump_module.as_ref().ok_or_else(|| IreeError::NotFound {
        looked: format!(
            "iree-dump-module beside {}, needed to read {}",
            tc.run_module.display(),
            vmfb.display()
        ),
    })?;
    let metadata = dump(tool, vmfb, &["--output=metadata"])?;
    let functions = parse_functions(&metadata).map_err(|e| bad(vmfb, e))?;
    let init = dump(tool, vmfb, &["--output=disassembly", "--function=__init"])?;
    let parameters = parse_parameter_reads(&init).map_err(|e| bad(vmfb, e))?;
    Ok(ModuleInfo {
        functions,
        parameters,
        formats: parse_formats(&init),
    })
}

/// The executable formats `__init`'s disassembly names: each
/// `available formats: [F, …]` of the failure it raises when the device
/// supports no variant of an executable.
fn parse_formats(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let Some(i) = line.find("available formats: [") else {
            continue;
        };
        let rest = &line[i + "available formats: [".len()..];
        let list = rest.split(']').next().unwrap_or("");
        for f in list.split(',').map(str::trim).filter(|f| !f.is_empty()) {
            if !out.iter().any(|o| o == f) {
                out.push(f.to_string());
            }
        }
    }
    out
}

fn bad(vmfb: &Path, what: String) -> IreeError {
    IreeError::BadOutput(format!("iree-dump-module on {}: {what}", vmfb.display()))
}

fn dump(tool: &Path, vmfb: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(tool)
        .args(args)
        .arg(vmfb)
        .output()
        .map_err(|source| IreeError::Spawn {
            tool: tool.to_path_buf(),
            source,
        })?;
    if !out.status.success() {
        return Err(IreeError::InspectFailed {
            module: vmfb.to_path_buf(),
            status: super::status_text(&out.status),
            stderr: super::trim_log(&String::from_utf8_lossy(&out.stderr), 20),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The exported functions of `iree-dump-module --output=metadata`: each
/// `iree.abi.declaration: sync func @NAME(%input0: T, …) -> (%output0: T, …)`.
fn parse_functions(text: &str) -> Result<Vec<FunctionSignature>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(decl) = line.trim().strip_prefix("iree.abi.declaration:") else {
            continue;
        };
        let decl = decl.trim();
        let at = decl
            .find('@')
            .ok_or_else(|| format!("no function name in {decl:?}"))?;
        let open = decl[at..]
            .find('(')
            .map(|i| at + i)
            .ok_or_else(|| format!("no argument list in {decl:?}"))?;
        let name = decl[at + 1..open].to_string();
        let (args, rest) = balanced(&decl[open..]).ok_or_else(|| format!("unbalanced {decl:?}"))?;
        let results = rest.trim_start().strip_prefix("->").map(str::trim_start);
        let outputs = match results {
            Some(r) if r.starts_with('(') => {
                balanced(r).ok_or_else(|| format!("unbalanced {decl:?}"))?.0
            }
            Some(r) => r,
            None => "",
        };
        out.push(FunctionSignature {
            name,
            inputs: tensor_types(args),
            outputs: tensor_types(outputs),
        });
    }
    Ok(out)
}

/// The text inside the parenthesis that `s` opens, and what follows it.
fn balanced(s: &str) -> Option<(&str, &str)> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '<' | '{' | '[' => depth += 1,
            ')' | '>' | '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some((&s[1..i], &s[i + 1..]));
                }
            }
            _ => {}
        }
    }
    None
}

/// Every `tensor<…>` in `s`, in order.
fn tensor_types(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find("tensor<") {
        let from = &rest[i + "tensor".len()..];
        match balanced(from) {
            Some((inner, after)) => {
                out.push(format!("tensor<{inner}>"));
                rest = after;
            }
            None => break,
        }
    }
    out
}

/// The parameter reads of `__init`'s disassembly: every `io_parameters.load`
/// call names a scope and three read-only data segments (a key table of u32
/// offset/length pairs into the key bytes, the key bytes, and one
/// (source offset, target offset, length) i64 triple per key).
fn parse_parameter_reads(text: &str) -> Result<Vec<ParameterRead>, String> {
    let mut rodata: HashMap<usize, Vec<u8>> = HashMap::new();
    // The last `vm.const.ref.rodata` each register was set to.
    let mut regs: HashMap<String, usize> = HashMap::new();
    let mut reads = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("vm.rodata[") {
            let (index, hex) = rest
                .split_once("] = ")
                .ok_or_else(|| format!("cannot read {line:.60}"))?;
            let index: usize = index
                .parse()
                .map_err(|_| format!("rodata index {index:?}"))?;
            rodata.insert(index, from_hex(hex.trim())?);
            continue;
        }
        if let Some((lhs, rhs)) = line.split_once(" = ") {
            let reg = lhs.trim().to_ascii_lowercase();
            match rhs.strip_prefix("vm.const.ref.rodata ") {
                Some(r) => {
                    let index = r.split_whitespace().next().unwrap_or("");
                    let index = index.parse().map_err(|_| format!("rodata ref {r:?}"))?;
                    regs.insert(reg, index);
                }
                None => {
                    regs.remove(&reg);
                }
            }
        }
        let Some(call) = line.split_once("vm.call @io_parameters.load(").map(|x| x.1) else {
            continue;
        };
        let args: Vec<String> = call
            .trim_end_matches(')')
            .split(',')
            .map(|a| a.trim().to_ascii_lowercase())
            .collect();
        if args.len() != 11 {
            return Err(format!("io_parameters.load with {} arguments", args.len()));
        }
        let segment = |arg: &str| -> Result<&Vec<u8>, String> {
            let index = regs
                .get(arg)
                .ok_or_else(|| format!("io_parameters.load argument {arg} is not a constant"))?;
            rodata
                .get(index)
                .ok_or_else(|| format!("rodata {index} is not in the dump"))
        };
        let scope = String::from_utf8_lossy(segment(&args[4])?).into_owned();
        let table = segment(&args[8])?;
        let keys = segment(&args[9])?;
        let spans = segment(&args[10])?;
        reads.extend(decode_load(&scope, table, keys, spans)?);
    }
    Ok(reads)
}

fn decode_load(
    scope: &str,
    table: &[u8],
    keys: &[u8],
    spans: &[u8],
) -> Result<Vec<ParameterRead>, String> {
    use byteorder::{ByteOrder, LittleEndian};
    if table.len() % 8 != 0 || spans.len() != table.len() / 8 * 24 {
        return Err(format!(
            "a parameter load's key table ({} bytes) and spans ({} bytes) disagree",
            table.len(),
            spans.len()
        ));
    }
    let mut out = Vec::with_capacity(table.len() / 8);
    for (entry, span) in table.chunks_exact(8).zip(spans.chunks_exact(24)) {
        let start = LittleEndian::read_u32(&entry[..4]) as usize;
        let len = LittleEndian::read_u32(&entry[4..]) as usize;
        let key = keys
            .get(start..start + len)
            .ok_or_else(|| format!("key bytes {start}+{len} past {} bytes", keys.len()))?;
        out.push(ParameterRead {
            scope: scope.to_string(),
            key: String::from_utf8_lossy(key).into_owned(),
            offset: LittleEndian::read_u64(&span[..8]),
            length: LittleEndian::read_u64(&span[16..]),
        });
    }
    Ok(out)
}

fn from_hex(hex: &str) -> Result<Vec<u8>, String> {
    if hex.len() % 2 != 0 {
        return Err("odd-length hex in a rodata segment".into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| "bad hex in rodata".into()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_signatures_of_a_kv_pair() {
        let text = "Exported Functions:\n  [  0] s_prefill(!vm.ref<?>) -> (!vm.ref<?>)\n        iree.abi.declaration: sync func @s_prefill(%input0: tensor<1x8xi32>, %input1: tensor<i32>, %input3: tensor<30x3x64x64xf32> {iree.abi.output = 1 : index}) -> (%output0: tensor<i32>, %output1: tensor<30x3x64x64xf32>)\n  [  1] t(!vm.ref<?>) -> (!vm.ref<?>)\n        iree.abi.declaration: sync func @t(%input0: tensor<1x8xi32>) -> (%output0: tensor<8xi32>)\n";
        let f = parse_functions(text).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].name, "s_prefill");
        assert_eq!(
            f[0].inputs,
            ["tensor<1x8xi32>", "tensor<i32>", "tensor<30x3x64x64xf32>"]
        );
        assert_eq!(f[0].outputs, ["tensor<i32>", "tensor<30x3x64x64xf32>"]);
        assert_eq!(f[1].outputs, ["tensor<8xi32>"]);
    }

    #[test]
    fn reads_parameter_loads() {
        // Two keys, "ab" (bytes 0..9216) and "c" (bytes 16..112).
        let text = "vm.rodata[1] = 6D6F64656C\n\
            vm.rodata[7] = 00000000020000000200000001000000\n\
            vm.rodata[8] = 616263\n\
            vm.rodata[9] = 000000000000000000000000000000000024000000000000\
            100000000000000000000000000000006000000000000000\n\
            %r4 = vm.const.ref.rodata 1  // 5b\n\
            %r7 = vm.const.ref.rodata 7  // 16b\n\
            %r8 = vm.const.ref.rodata 8  // 3b\n\
            %r9 = vm.const.ref.rodata 9  // 48b\n\
            %r10 = vm.call @io_parameters.load(%r1, %i18, %r2, %r6, %r4, %i18, %i35, %i48, %R7, %R8, %R9)\n";
        let reads = parse_parameter_reads(text).unwrap();
        assert_eq!(reads.len(), 2);
        assert_eq!(
            (reads[0].scope.as_str(), reads[0].key.as_str()),
            ("model", "ab")
        );
        assert_eq!((reads[0].offset, reads[0].length), (0, 9216));
        assert_eq!(
            (reads[1].key.as_str(), reads[1].offset, reads[1].end()),
            ("c", 16, 112)
        );
    }
}
