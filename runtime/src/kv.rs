//! The KV-cache pair of a kiln export, driven on a [`Session`]: prefill
//! and decode functions over K/V caches that stay on the device between
//! calls (each call's result buffers are the next call's arguments, and
//! IREE writes the results into them in place).
//!
//! The functions' contract (spec/kv-cache.md): `prefill(ids [1, P], start,
//! length, caches…) -> (id, caches…[, values [K], ids [K]])` and
//! `decode(token [1], position, caches…) -> (id, caches…[, values, ids])`.

use crate::{ElementType, Error, Function, Result, Session, Tensor};

/// One cache tensor's type: element type and shape `[L, KV, N, D]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheType {
    /// The element type (`bf16`, `f32`, or `i32` pairs on Vulkan).
    pub element: ElementType,
    /// The shape.
    pub shape: Vec<usize>,
}

/// What one prefill or decode call predicts: the next id and, from a
/// sampling module, the top K ids and their logits (largest first).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The in-graph argmax.
    pub id: i32,
    /// The top K ids (empty from a greedy module).
    pub top_ids: Vec<i32>,
    /// Their logits, in the same order.
    pub top_values: Vec<f32>,
}

/// A KV pair loaded on a session: its function pairs (one per attention
/// span, the pair over all N positions last) and its caches.
pub struct KvPair {
    session: Session,
    functions: Vec<(Function, Function)>,
    caches_types: Vec<CacheType>,
    caches: Option<Vec<Tensor>>,
}

impl KvPair {
    /// The pairs `functions` (prefill, decode names) of `session`'s module
    /// over caches of `caches` types.
    pub fn new(
        session: Session,
        functions: &[(String, String)],
        caches: Vec<CacheType>,
    ) -> Result<KvPair> {
        let functions = functions
            .iter()
            .map(|(p, d)| Ok((session.function(p)?, session.function(d)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(KvPair {
            session,
            functions,
            caches_types: caches,
            caches: None,
        })
    }

    /// The session the pair runs on.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Zeroed caches: a new conversation.
    pub fn reset(&mut self) -> Result<()> {
        self.caches = None;
        let mut caches = Vec::with_capacity(self.caches_types.len());
        for t in &self.caches_types {
            let zeros = vec![0u8; t.shape.iter().product::<usize>() * t.element.bytes()];
            caches.push(self.session.tensor(t.element, &t.shape, &zeros)?);
        }
        self.caches = Some(caches);
        Ok(())
    }

    /// Prefills the chunk `ids` (P ids) at `start`, of which `length` are
    /// real, with pair `pair`.
    pub fn prefill(&mut self, pair: usize, ids: &[i32], start: i32, length: i32) -> Result<Step> {
        let f = self.pair(pair)?.0.clone();
        let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
        let args = vec![
            self.session
                .tensor(ElementType::I32, &[1, ids.len()], &bytes)?,
            self.scalar(start)?,
            self.scalar(length)?,
        ];
        self.call(&f, args)
    }

    /// Decodes `token` at `position` with pair `pair`.
    pub fn decode(&mut self, pair: usize, token: i32, position: i32) -> Result<Step> {
        let f = self.pair(pair)?.1.clone();
        let args = vec![
            self.session
                .tensor(ElementType::I32, &[1], &token.to_le_bytes())?,
            self.scalar(position)?,
        ];
        self.call(&f, args)
    }

    fn pair(&self, i: usize) -> Result<&(Function, Function)> {
        self.functions.get(i).ok_or_else(|| Error::Call {
            function: String::new(),
            message: format!(
                "no function pair {i} (the module has {})",
                self.functions.len()
            ),
        })
    }

    fn scalar(&self, v: i32) -> Result<Tensor> {
        self.session.tensor(ElementType::I32, &[], &v.to_le_bytes())
    }

    /// Calls `f` on `args` then the caches; keeps the returned caches.
    fn call(&mut self, f: &Function, args: Vec<Tensor>) -> Result<Step> {
        // Taken: after a failed call the caches may be half-written, so a
        // new conversation must reset them.
        let caches = self.caches.take().ok_or_else(|| Error::Call {
            function: f.name().to_string(),
            message: "called before the caches were reset".into(),
        })?;
        let mut inputs: Vec<&Tensor> = args.iter().collect();
        inputs.extend(caches.iter());
        let mut outs = self.session.call(f, &inputs)?;
        let n = self.caches_types.len();
        if outs.len() != 1 + n && outs.len() != 3 + n {
            return Err(Error::Call {
                function: f.name().to_string(),
                message: format!("{} results, expected {} or {}", outs.len(), 1 + n, 3 + n),
            });
        }
        let rest = outs.split_off(1);
        let id = *self
            .session
            .read_i32(&outs[0])?
            .first()
            .ok_or_else(|| Error::Call {
                function: f.name().to_string(),
                message: "no id".into(),
            })?;
        let mut rest = rest.into_iter();
        let caches: Vec<Tensor> = rest.by_ref().take(n).collect();
        let top: Vec<Tensor> = rest.collect();
        self.caches = Some(caches);
        let (top_values, top_ids) = match &top[..] {
            [values, ids] => (self.session.read_f32(values)?, self.session.read_i32(ids)?),
            _ => (Vec::new(), Vec::new()),
        };
        Ok(Step {
            id,
            top_ids,
            top_values,
        })
    }
}
