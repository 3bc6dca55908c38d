//! The step interfaces of [`crate::step`] over a loaded IREE [`Session`]:
//! [`ForwardSession`] is a [`Forward`] (the redecode forward: SEQ ids in,
//! SEQ predicted ids out), [`KvSession`] a [`KvStep`] (the KV pair, its
//! caches kept on the device between calls by [`KvPair`]).

use crate::step::{self, candidates, Forward, KvSpec, KvStep, Prediction};
use crate::types::TensorType;
use crate::{CacheType, ElementType, Error, Function, KvPair, Session, Step};

/// The i32 ids as the runtime's bytes.
pub(crate) fn id_bytes(ids: &[i32]) -> Vec<u8> {
    ids.iter().flat_map(|i| i.to_le_bytes()).collect()
}

/// The runtime's element type of a tensor type kiln passes (ids, caches).
fn element(t: &TensorType) -> Result<ElementType, Error> {
    ElementType::from_name(t.dtype.mlir()).ok_or_else(|| Error::Call {
        function: String::new(),
        message: format!("no runtime element type for {t}"),
    })
}

/// A loaded module serving its redecode forward: each step passes SEQ
/// ids and reads SEQ predicted ids back.
pub struct ForwardSession {
    session: Session,
    function: Function,
    seq: usize,
}

impl ForwardSession {
    /// `session`'s `function`, which takes `[1, seq]` ids.
    pub fn new(session: Session, function: &str, seq: usize) -> Result<ForwardSession, Error> {
        let function = session.function(function)?;
        Ok(ForwardSession {
            session,
            function,
            seq,
        })
    }

    /// Runs one forward pass on SEQ ids.
    pub fn run(&mut self, ids: &[i32]) -> Result<Vec<i32>, Error> {
        let input = self
            .session
            .tensor(ElementType::I32, &[1, ids.len()], &id_bytes(ids))?;
        let outs = self.session.call(&self.function, &[&input])?;
        let v = match outs.first() {
            Some(first) => self.session.read_i32(first)?,
            None => Vec::new(),
        };
        if v.len() != self.seq {
            return Err(Error::Call {
                function: self.function.name().to_string(),
                message: format!("returned {} ids, not SEQ = {}", v.len(), self.seq),
            });
        }
        Ok(v)
    }
}

impl Forward for ForwardSession {
    fn seq(&self) -> usize {
        self.seq
    }
    fn forward(&mut self, ids: &[i32]) -> step::Result<Vec<i32>> {
        Ok(self.run(ids)?)
    }
}

/// The runtime's failures in a step call, kept whole.
impl From<Error> for step::CallError {
    fn from(e: Error) -> Self {
        step::CallError::runtime(e)
    }
}

/// A loaded KV-cache module (`kiln export --kv-cache`) serving its pair:
/// prefill and decode, the K/V caches kept on the device between calls.
pub struct KvSession {
    pair: KvPair,
    spec: KvSpec,
}

impl KvSession {
    /// `session`'s pair `kv`.
    pub fn new(session: Session, kv: &KvSpec) -> Result<KvSession, Error> {
        let functions: Vec<(String, String)> = kv
            .functions()
            .iter()
            .map(|(p, d)| (p.to_string(), d.to_string()))
            .collect();
        let caches = kv
            .caches
            .iter()
            .map(|c| {
                Ok(CacheType {
                    element: element(c)?,
                    shape: c.shape.to_vec(),
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(KvSession {
            pair: KvPair::new(session, &functions, caches)?,
            spec: kv.clone(),
        })
    }
}

/// The runtime's step as a prediction.
fn prediction(step: Step) -> Result<Prediction, Error> {
    let top = if step.top_ids.is_empty() {
        Vec::new()
    } else {
        candidates(&step.top_ids, &step.top_values).ok_or_else(|| Error::Call {
            function: String::new(),
            message: "a module returned a bad top-K".into(),
        })?
    };
    Ok(Prediction { id: step.id, top })
}

impl KvStep for KvSession {
    fn prompt_len(&self) -> usize {
        self.spec.prompt_len
    }
    fn max_context(&self) -> usize {
        self.spec.max_context()
    }
    fn reset(&mut self) -> step::Result<()> {
        Ok(self.pair.reset()?)
    }
    fn prefill(&mut self, chunk: &[i32], start: usize, length: usize) -> step::Result<Prediction> {
        let f = self.spec.prefill_pair(chunk.len(), start, length)?;
        let step = self.pair.prefill(f, chunk, start as i32, length as i32)?;
        Ok(prediction(step)?)
    }
    fn decode(&mut self, token: i32, position: usize) -> step::Result<Prediction> {
        let f = self.spec.decode_pair(position)?;
        let step = self.pair.decode(f, token, position as i32)?;
        Ok(prediction(step)?)
    }
}
