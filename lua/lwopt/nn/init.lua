-- lwopt.nn: model modules over the C kernels (src/core/nn_*.c), torch-nn style, one module per
-- file in lwopt/nn/. Every module follows one contract, written at the top of nn/module.lua:
-- it declares its parameters at construction and never allocates them (lw.ddp binds each to
-- its buffer view), forward(input, shape...) -> output, backward(input, grad_output,
-- grad_input, shape...) accumulating gradients, and it reads its parameters only through
-- with_params, which tells the runtime when they are used and when a gradient is complete, so
-- communication overlaps compute. Activations live in buffers allocated once per shape.
local base = require("lwopt.nn.module")

return {
   Module = base.Module,
   Linear = require("lwopt.nn.linear"),
   -- tensor parallelism's shards (docs/algorithms.md section 9)
   ColumnParallelLinear = require("lwopt.nn.column_parallel"),
   RowParallelLinear = require("lwopt.nn.row_parallel"),
   VocabParallelEmbedding = require("lwopt.nn.vocab_embedding"),
   Embedding = require("lwopt.nn.embedding"),
   LayerNorm = require("lwopt.nn.layernorm"),
   GELU = require("lwopt.nn.gelu"),
   -- LLaMA's and nanochat's parts: the norm (gain optional) and the MLP's other activations
   RMSNorm = require("lwopt.nn.rmsnorm"),
   ReLU2 = require("lwopt.nn.relu2"),
   SwiGLU = require("lwopt.nn.swiglu"),
   CausalSelfAttention = require("lwopt.nn.attention"),
   -- in place on a qkv activation's Q and K heads: rotary embeddings, per-head RMS norm
   Rotary = require("lwopt.nn.rotary"),
   QKNorm = require("lwopt.nn.qk_norm"),
   MLP = require("lwopt.nn.mlp"),
   MoE = require("lwopt.nn.moe"),
   Block = require("lwopt.nn.block"),
   -- nanochat's per-layer residual scalars (its value embeddings are CausalSelfAttention's)
   ResidualScalars = require("lwopt.nn.residual_scalars"),
   GPT = require("lwopt.nn.gpt"),
   -- Bytes of activation buffers allocated by the modules of this process.
   activation_bytes = base.activation_bytes,
}
