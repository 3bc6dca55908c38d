//! A module (functions sharing parameters) and its parameter declarations.

use super::{Graph, GraphError, TensorType};

/// A module: one or more functions, plus advisory attributes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Module {
    /// Module name (printed as `module @name`).
    pub name: String,
    /// Advisory attributes, printed verbatim as `key = value`, in order.
    /// They never change what the graph computes.
    pub attributes: Vec<(String, String)>,
    /// Functions, in order.
    pub functions: Vec<Graph>,
}

impl Module {
    /// An empty module.
    pub fn new(name: impl Into<String>) -> Self {
        Module {
            name: name.into(),
            ..Default::default()
        }
    }

    /// Records which axes of the exported function's first argument are
    /// independent, as the advisory `kiln.schedule` attribute, e.g.
    /// `[("batch", 0), ("position", 1)]`.
    pub fn set_schedule(&mut self, axes: &[(&str, usize)]) {
        let text = axes
            .iter()
            .map(|(n, a)| format!("{n}=arg0[{a}]"))
            .collect::<Vec<_>>()
            .join(", ");
        self.attributes.retain(|(k, _)| k != "kiln.schedule");
        self.attributes
            .push(("kiln.schedule".into(), format!("\"independent: {text}\"")));
    }

    /// Every distinct parameter declaration (key and offset) over all
    /// functions, in order of first appearance. Errors if one declaration
    /// has two types.
    pub fn parameters(&self) -> Result<Vec<ParamDecl>, GraphError> {
        let mut seen: Vec<ParamDecl> = Vec::new();
        let mut index = std::collections::HashMap::new();
        for f in &self.functions {
            for d in f.parameters() {
                match index.get(&(d.key.clone(), d.offset)) {
                    None => {
                        index.insert((d.key.clone(), d.offset), seen.len());
                        seen.push(d);
                    }
                    Some(&i) if seen[i].ty != d.ty => {
                        return Err(GraphError {
                            op: "parameter",
                            msg: format!(
                                "parameter {} is used as {} and as {}",
                                d.describe(),
                                seen[i].ty,
                                d.ty
                            ),
                        })
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(seen)
    }
}

/// One external parameter declaration: an archive key, the part of its
/// entry (all of it, or from a byte offset) and the stored type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamDecl {
    /// The archive key.
    pub key: String,
    /// Byte offset into the entry; `None` for the whole entry.
    pub offset: Option<u64>,
    /// The declared type (its byte size is the declared length).
    pub ty: TensorType,
}

impl ParamDecl {
    /// `"key"`, or `"key" bytes A..B` for a part, for messages.
    pub fn describe(&self) -> String {
        match self.offset {
            None => format!("\"{}\"", self.key),
            Some(o) => format!(
                "\"{}\" bytes {o}..{}",
                self.key,
                o + self.ty.byte_size() as u64
            ),
        }
    }
}
