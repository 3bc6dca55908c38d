//! The op vocabulary: what a node computes, with its attributes.

/// Dimension numbers of a `dot_general`. The result's dims are the batch
/// dims, then the lhs free dims, then the rhs free dims, each in order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct DotDims {
    /// Batch dims of the lhs.
    pub lhs_batch: Vec<usize>,
    /// Batch dims of the rhs (paired with `lhs_batch`).
    pub rhs_batch: Vec<usize>,
    /// Contracting dims of the lhs.
    pub lhs_contract: Vec<usize>,
    /// Contracting dims of the rhs (paired with `lhs_contract`).
    pub rhs_contract: Vec<usize>,
}

/// Elementwise binary ops (operands and result share one type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `stablehlo.add`
    Add,
    /// `stablehlo.subtract`
    Subtract,
    /// `stablehlo.multiply`
    Multiply,
    /// `stablehlo.divide`
    Divide,
    /// `stablehlo.maximum`
    Maximum,
    /// `stablehlo.minimum`
    Minimum,
    /// `stablehlo.power`
    Power,
}

impl BinaryOp {
    /// All binary ops.
    pub const ALL: [BinaryOp; 7] = [
        BinaryOp::Add,
        BinaryOp::Subtract,
        BinaryOp::Multiply,
        BinaryOp::Divide,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Power,
    ];

    /// Op name without dialect prefix.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Subtract => "subtract",
            BinaryOp::Multiply => "multiply",
            BinaryOp::Divide => "divide",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Power => "power",
        }
    }
}

/// Elementwise unary ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `stablehlo.negate`
    Negate,
    /// `stablehlo.exponential`
    Exponential,
    /// `stablehlo.log`
    Log,
    /// `stablehlo.rsqrt`
    Rsqrt,
    /// `stablehlo.sqrt`
    Sqrt,
    /// `stablehlo.tanh`
    Tanh,
    /// `stablehlo.logistic`
    Logistic,
    /// `stablehlo.abs`
    Abs,
    /// `stablehlo.round_nearest_even`
    RoundNearestEven,
}

impl UnaryOp {
    /// All unary ops.
    pub const ALL: [UnaryOp; 9] = [
        UnaryOp::Negate,
        UnaryOp::Exponential,
        UnaryOp::Log,
        UnaryOp::Rsqrt,
        UnaryOp::Sqrt,
        UnaryOp::Tanh,
        UnaryOp::Logistic,
        UnaryOp::Abs,
        UnaryOp::RoundNearestEven,
    ];

    /// Op name without dialect prefix.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Negate => "negate",
            UnaryOp::Exponential => "exponential",
            UnaryOp::Log => "log",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Logistic => "logistic",
            UnaryOp::Abs => "abs",
            UnaryOp::RoundNearestEven => "round_nearest_even",
        }
    }
}

/// Comparison direction of `stablehlo.compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompareDir {
    /// equal
    Eq,
    /// not equal
    Ne,
    /// less than
    Lt,
    /// less or equal
    Le,
    /// greater than
    Gt,
    /// greater or equal
    Ge,
}

impl CompareDir {
    /// All directions.
    pub const ALL: [CompareDir; 6] = [
        CompareDir::Eq,
        CompareDir::Ne,
        CompareDir::Lt,
        CompareDir::Le,
        CompareDir::Gt,
        CompareDir::Ge,
    ];

    /// Whether `x` compares to `y` in this direction (`x < y` for `Lt`).
    pub fn holds<T: PartialOrd>(self, x: T, y: T) -> bool {
        match self {
            CompareDir::Eq => x == y,
            CompareDir::Ne => x != y,
            CompareDir::Lt => x < y,
            CompareDir::Le => x <= y,
            CompareDir::Gt => x > y,
            CompareDir::Ge => x >= y,
        }
    }

    /// MLIR spelling (`EQ`, `NE`, …).
    pub fn name(self) -> &'static str {
        match self {
            CompareDir::Eq => "EQ",
            CompareDir::Ne => "NE",
            CompareDir::Lt => "LT",
            CompareDir::Le => "LE",
            CompareDir::Gt => "GT",
            CompareDir::Ge => "GE",
        }
    }
}

/// The combining function of a [`Op::Reduce`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// Sum (init 0).
    Sum,
    /// Maximum (init -inf, or i32::MIN).
    Max,
    /// Minimum (init +inf, or i32::MAX).
    Min,
}

impl ReduceKind {
    /// The StableHLO op used in the reduction body.
    pub fn body_op(self) -> &'static str {
        match self {
            ReduceKind::Sum => "add",
            ReduceKind::Max => "maximum",
            ReduceKind::Min => "minimum",
        }
    }
}

/// The form of a [`Op::DequantizeBlocks`]: how codes sit in their i32
/// words and how each group of them is scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockCodes {
    /// Bits per code in the low words (4 or 8; 1, 2 or 16 also unpack).
    pub low_bits: u32,
    /// Bits per code in the high words, `0` when there are none.
    pub high_bits: u32,
    /// Elements per group (one scale, and one minimum, per group).
    pub group: usize,
    /// Offset subtracted from each unsigned code before it is scaled.
    pub zero: u32,
    /// Whether a minimum is added after the scale.
    pub has_min: bool,
}

impl BlockCodes {
    /// How many operands the op takes: the low words, the high words if
    /// any, the scales, the minimums if any.
    pub fn arity(&self) -> usize {
        2 + usize::from(self.high_bits > 0) + usize::from(self.has_min)
    }
}

/// Literal data of a constant: one value per element (or one for a splat),
/// stored as f64, which holds every f32/bf16/f16/i32/i1 value exactly.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// Every element has this value.
    Splat(f64),
    /// Row-major values, exactly `numel` of them.
    Dense(Vec<f64>),
}

/// What a node computes. Attributes live here; operands are in
/// [`Node::args`](super::Node::args); the result type in [`Node::ty`](super::Node::ty).
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Function argument number `index`.
    Input {
        /// Position in the function signature.
        index: usize,
    },
    /// A named external weight, in its stored dtype.
    Parameter {
        /// The checkpoint's tensor name (the archive key).
        key: String,
        /// `None`: the whole archive entry. `Some(bytes)`: the part of the
        /// entry that starts `bytes` into it and is as long as the node's
        /// type, e.g. a row chunk of a table too large for one device
        /// buffer ([`Graph::parameter_part`](super::Graph::parameter_part)).
        offset: Option<u64>,
    },
    /// A constant tensor.
    Constant(Literal),
    /// Element type conversion.
    Convert,
    /// Reinterprets each element's bits as another element type of the
    /// same width (`stablehlo.bitcast_convert`).
    BitcastConvert,
    /// `stablehlo.shift_left` of i32 operands (bits shifted out are lost;
    /// shifts of 32 or more give 0).
    ShiftLeft,
    /// `stablehlo.shift_right_logical` of i32 operands (zeros shifted in;
    /// shifts of 32 or more give 0).
    ShiftRightLogical,
    /// `stablehlo.and` of i32 operands (bitwise).
    BitwiseAnd,
    /// `stablehlo.optimization_barrier`: the identity, which IREE does not
    /// fuse across.
    OptimizationBarrier,
    /// Elementwise binary op.
    Binary(BinaryOp),
    /// Elementwise unary op.
    Unary(UnaryOp),
    /// Elementwise comparison, result i1.
    Compare(CompareDir),
    /// `select(pred, on_true, on_false)`.
    Select,
    /// `broadcast_in_dim`: operand dim i goes to result dim `dims[i]`.
    BroadcastInDim {
        /// Result dim of each operand dim.
        dims: Vec<usize>,
    },
    /// Reshape to the node's type.
    Reshape,
    /// Permute dims: result dim i is operand dim `perm[i]`.
    Transpose {
        /// Permutation.
        perm: Vec<usize>,
    },
    /// Strided slice.
    Slice {
        /// Start index per dim.
        start: Vec<usize>,
        /// Exclusive limit per dim.
        limit: Vec<usize>,
        /// Stride per dim (≥ 1).
        strides: Vec<usize>,
    },
    /// `stablehlo.dynamic_update_slice`: args (operand, update, one i32
    /// scalar start index per dim). The result is the operand with the
    /// update written at the starts, each clamped to
    /// `0..=operand_dim - update_dim` as StableHLO specifies.
    DynamicUpdateSlice,
    /// `stablehlo.scatter` of whole rows (the inverse of
    /// [`Op::GatherRows`]): args (operand `[d0, …, dk, D]`, i32 indices
    /// `[B, k + 1]`, updates `[B, D]` of the operand's dtype). The result
    /// is the operand with row `b` of the updates written at
    /// `operand[indices[b, 0], …, indices[b, k], :]`. The indices must be
    /// in range and distinct (StableHLO leaves other writes
    /// implementation-defined; kiln's interpreter refuses them). Unlike
    /// `dynamic_update_slice`, its indices stay on the device: IREE need
    /// not read them to the host, so a call's command buffer can be
    /// recorded once (`spec/stablehlo-subset.md`).
    ScatterRows,
    /// Concatenation of all args along `dim`.
    Concatenate {
        /// The dim joined along.
        dim: usize,
    },
    /// Indices along `dim`, broadcast over the other dims.
    Iota {
        /// The counting dim.
        dim: usize,
    },
    /// General contraction.
    DotGeneral(DotDims),
    /// Reduction over `dims`; args are (operand, init scalar).
    Reduce {
        /// Combining function.
        kind: ReduceKind,
        /// Dims reduced away (sorted, unique).
        dims: Vec<usize>,
    },
    /// Row gather (embedding lookup): args (table `[V, D]`, i32 ids of any
    /// shape), result `ids.shape + [D]`.
    GatherRows,
    /// The f32 values of block-quantized codes, in one op: args (low words
    /// i32 `[..., W]`, high words i32 `[..., Wh]` if any, f32 scales
    /// `[..., G]`, f32 minimums `[..., G]` if any), result f32 `[..., K]`.
    /// Element `k` of a row is `(f32(lo | hi << low_bits) − zero)·scale +
    /// min`, its code the `k mod n`-th `low_bits`-bit field of word
    /// `k / n` (`n = 32/low_bits`; likewise the high bits), its scale and
    /// minimum those of group `k / group`. Printed as one `linalg.generic`,
    /// so IREE can widen a whole matrix once at load
    /// (`spec/stablehlo-subset.md`).
    DequantizeBlocks(BlockCodes),
    /// Index of the maximum along `dim` (lowest index on ties), as i32.
    /// Args: (operand, i32 iota over operand's shape along `dim`, -inf init, 0 init).
    Argmax {
        /// The dim reduced away.
        dim: usize,
    },
}

impl Op {
    /// Short op name for errors and statistics.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Parameter { .. } => "parameter",
            Op::Constant(_) => "constant",
            Op::Convert => "convert",
            Op::BitcastConvert => "bitcast_convert",
            Op::ShiftLeft => "shift_left",
            Op::ShiftRightLogical => "shift_right_logical",
            Op::BitwiseAnd => "and",
            Op::OptimizationBarrier => "optimization_barrier",
            Op::Binary(b) => b.name(),
            Op::Unary(u) => u.name(),
            Op::Compare(_) => "compare",
            Op::Select => "select",
            Op::BroadcastInDim { .. } => "broadcast_in_dim",
            Op::Reshape => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Slice { .. } => "slice",
            Op::DynamicUpdateSlice => "dynamic_update_slice",
            Op::ScatterRows => "scatter",
            Op::Concatenate { .. } => "concatenate",
            Op::Iota { .. } => "iota",
            Op::DotGeneral(_) => "dot_general",
            Op::Reduce { .. } => "reduce",
            Op::GatherRows => "gather",
            Op::DequantizeBlocks(_) => "dequantize_blocks",
            Op::Argmax { .. } => "argmax",
        }
    }
}
