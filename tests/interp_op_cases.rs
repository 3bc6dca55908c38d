//! The interpreter on the op-coverage cases: every op and composite gives
//! the values tests/common/op_cases.rs computes independently (the same
//! cases tests/iree_ops.rs runs on IREE), within each case's tolerance.

use crate::common;
use common::op_cases::{self, Data, HostT};
use kiln::interp::{run, Tensor};
use std::collections::HashMap;

#[test]
fn every_op_case_matches_in_the_interpreter() {
    let mut failures = Vec::new();
    let no_params: HashMap<String, Tensor> = HashMap::new();
    for c in op_cases::all() {
        let inputs: Vec<Tensor> = c
            .inputs
            .iter()
            .map(|t| match &t.data {
                Data::F32(v) => Tensor::f32(&t.shape, v.clone()),
                Data::I32(v) => Tensor::i32(&t.shape, v.clone()),
            })
            .collect();
        match run(&c.graph, &inputs, &no_params) {
            Ok(out) => {
                let got = match &out[0] {
                    Tensor::F32 { shape, data } => HostT::f(shape, data.clone()),
                    Tensor::I32 { shape, data } => HostT::i(shape, data.clone()),
                    other => {
                        failures.push(format!(
                            "{}: unexpected result {}",
                            c.name,
                            other.describe()
                        ));
                        continue;
                    }
                };
                if let Err(e) = op_cases::check(&c, &got) {
                    failures.push(e);
                }
            }
            Err(e) => failures.push(format!("{}: {e}", c.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
