//! The op-coverage cases build valid graphs that print, and every case
//! name is unique (the IREE and interpreter tests run them all).

use crate::common;
use common::op_cases;

#[test]
fn op_cases_build_and_print() {
    let cases = op_cases::all();
    let mut names: Vec<&str> = cases.iter().map(|c| c.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), cases.len());
    let mut m = kiln::graph::Module::new("ops");
    for c in cases {
        m.functions.push(c.graph);
    }
    let text = m.print(&Default::default(), None).unwrap();
    assert!(text.contains("func.func @argmax"));
}
