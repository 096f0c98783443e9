-- nn/vocab_embedding.lua: VocabParallelEmbedding, tensor parallelism's token + position embedding
-- (docs/algorithms.md section 9): each TP rank holds rows [r * rows, (r + 1) * rows) of the token
-- table (the vocabulary rounded up to a multiple of the group's size; rows past it are padding,
-- never looked up), looks up the tokens it holds (0 for the others) over
-- lw_embedding_range_forward, and the TP group's all-reduce sums the lookups; TP rank 0 adds the
-- position table (replicated) before it. Backward is local: each rank adds to its rows, and every
-- rank to the position table (the output gradient is the same on every rank). The module contract
-- is in nn/module.lua.
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local tp_mod = require("lwopt.tp")
local errors = require("lwopt.errors")

local lib = C.lib
local check = base.check

local VocabParallelEmbedding = base.class(base.Module)
VocabParallelEmbedding.shape_args = { "b", "t" }
-- both tables are read with their dtype
VocabParallelEmbedding.stored_reads = { ["wte.weight"] = true, ["wpe.weight"] = true }

-- VocabParallelEmbedding(vocab, c, seq_len, shared, tp, positions): wte {rows, c}, rows =
-- ceil(vocab / t),
-- with tp = { dim = 0, blocks = 1, rows = vocab } and full_shape {t * rows, c} (shared: the LM
-- head too);
-- wpe {seq_len, c}, replicated; named as in GPT-2. tp: lw.tp.groups's table.
function VocabParallelEmbedding.new(vocab, c, seq_len, shared, tp, positions)
   local self = setmetatable({}, VocabParallelEmbedding):init("")
   local rows = math.ceil(vocab / tp.size)
   self.tp, self.vocab, self.c, self.rows, self.first = tp, vocab, c, rows, tp.rank * rows
   self:declare("wte.weight", { rows, c }, "embedding", { shared_embedding = shared,
      tp = { dim = 0, blocks = 1, rows = vocab }, full_shape = { tp.size * rows, c } })
   -- positions false: none (as nn.Embedding's)
   if positions ~= false then self:declare("wpe.weight", { seq_len, c }, "embedding") end
   self.ready_order = positions ~= false and { "wpe.weight", "wte.weight" } or { "wte.weight" }
   return self
end

local function forward(self, tokens, b, t)
   local y = self:buffer("y", b * t * self.c)
   check(lib.lw_embedding_range_forward(self.stream, y, tokens, self.w["wte.weight"],
      self.tp.rank == 0 and self.w["wpe.weight"] or nil, self.dtype["wte.weight"], self.first,
      self.rows, b, t, self.c))
   return y
end

local function backward(self, tokens, dy, b, t)
   check(lib.lw_embedding_range_backward(self.stream, self.g["wte.weight"], self.g["wpe.weight"],
      dy, tokens, self.first, self.rows, b, t, self.c))
end

-- tokens: int32_t* [b*t] -> float* [b*t, c], the same on every TP rank
function VocabParallelEmbedding:forward(tokens, b, t)
   local y = self:with_params("forward", forward, tokens, b, t)
   tp_mod.allreduce(self.tp, self.device, y, b * t * self.c, "the token embedding's lookups")
   return y
end

-- Accumulates into the embedding gradients. Tokens have no gradient: dx must be nil.
function VocabParallelEmbedding:backward(tokens, dy, dx, b, t)
   if dx ~= nil then
      errors.misuse("nn.VocabParallelEmbedding", "tokens have no gradient; grad_input must be "
         .. "nil")
   end
   self:with_params("backward", backward, tokens, dy, b, t)
end

return VocabParallelEmbedding
