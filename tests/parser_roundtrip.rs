//! print → parse → print is the identity, for graphs using every op and
//! composite under all three constant policies, for every snapshot and
//! fixture module in the repository; and every truncation of a printed
//! module is an error, never a panic.

use crate::common;

use common::interp::{all_ops_module, random_weights, tiny_model, Tiny};
use kiln::graph::{DType, Module};
use kiln::stablehlo::{ConstantPolicy, ParsedModule, PrintOptions};
use std::collections::HashMap;
use std::path::Path;

fn policies() -> Vec<ConstantPolicy> {
    vec![
        ConstantPolicy::default(),
        ConstantPolicy::ExternalAlways {
            scope: "weights".into(),
        },
        ConstantPolicy::InlineAlways,
        ConstantPolicy::SizeThreshold {
            bytes: 40,
            scope: "model".into(),
        },
    ]
}

fn modules() -> Vec<Module> {
    vec![
        all_ops_module(),
        tiny_model(&Tiny::new(8, DType::BF16)),
        tiny_model(&Tiny::new(33, DType::F32)),
        tiny_model(&Tiny::new(5, DType::F16)),
    ]
}

#[test]
fn print_parse_print_is_identity() {
    for m in modules() {
        let w: HashMap<String, Vec<f64>> = random_weights(&m, 7);
        for policy in policies() {
            let opts = PrintOptions {
                constants: policy.clone(),
            };
            let text = m.print(&opts, Some(&w)).unwrap();
            let parsed = ParsedModule::parse(&text)
                .unwrap_or_else(|e| panic!("module @{} under {policy:?}:\n{e}", m.name));
            let again = parsed.module.print(&parsed.print_options(), None).unwrap();
            assert!(
                again == text,
                "module @{} under {policy:?} did not round-trip",
                m.name
            );
            if matches!(policy, ConstantPolicy::ExternalAlways { .. }) {
                // Debug text, because NaN constants make `==` false.
                let same = format!("{:?}", parsed.module) == format!("{m:?}");
                assert!(same, "module @{} parsed to another graph", m.name);
            }
        }
    }
}

/// The text of every module under `snapshots/` and `tests/fixtures/`.
fn repository_modules() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<(String, String)>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
                continue;
            }
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
            if ext != "mlir" && ext != "snap" {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&p) else {
                continue;
            };
            let body = if ext == "snap" {
                // insta: a `---` delimited header, then the content.
                match text
                    .strip_prefix("---\n")
                    .and_then(|t| t.split_once("\n---\n"))
                {
                    Some((_, b)) => b.to_string(),
                    None => continue,
                }
            } else {
                text
            };
            if body.trim_start().starts_with("module @") && body.contains("func.func") {
                out.push((p.display().to_string(), body));
            }
        }
    }
    let root = crate::common::root();
    let mut out = Vec::new();
    walk(&root.join("snapshots"), &mut out);
    walk(&root.join("tests/fixtures"), &mut out);
    out
}

#[test]
fn every_repository_module_round_trips() {
    let mods = repository_modules();
    for (path, text) in &mods {
        let parsed = ParsedModule::parse(text).unwrap_or_else(|e| panic!("{path}:\n{e}"));
        let again = parsed.module.print(&parsed.print_options(), None).unwrap();
        assert_eq!(
            again.trim_end(),
            text.trim_end(),
            "{path} did not round-trip"
        );
    }
    eprintln!("{} repository modules round-tripped", mods.len());
}

#[test]
fn every_truncation_is_an_error() {
    let m = all_ops_module();
    let w = random_weights(&m, 3);
    for policy in [ConstantPolicy::default(), ConstantPolicy::InlineAlways] {
        let text = m
            .print(&PrintOptions { constants: policy }, Some(&w))
            .unwrap();
        let end = text.trim_end().len();
        for cut in 0..end {
            if !text.is_char_boundary(cut) {
                continue;
            }
            let r = Module::parse(&text[..cut]);
            assert!(r.is_err(), "truncation at {cut} parsed");
        }
        assert!(Module::parse(&text[..end]).is_ok());
    }
}
