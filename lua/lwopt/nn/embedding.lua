-- nn/embedding.lua: Embedding, token + position, over lw_embedding_forward / _backward (the
-- module contract is in nn/module.lua).
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local errors = require("lwopt.errors")
local check = base.check

local lib = C.lib

local Embedding = base.class(base.Module)
Embedding.shape_args = { "b", "t" }
-- both tables are read with their dtype
Embedding.stored_reads = { ["wte.weight"] = true, ["wpe.weight"] = true }

-- Embedding(vocab, c, seq_len, shared): wte {vocab, c} (the LM head too when shared) and
-- wpe {seq_len, c}, named as in GPT-2.
function Embedding.new(vocab, c, seq_len, shared, positions)
   local self = setmetatable({}, Embedding):init("")
   self.vocab, self.c = vocab, c
   self:declare("wte.weight", { vocab, c }, "embedding", { shared_embedding = shared })
   -- positions false: none here (rotary embeddings give them in the attention)
   if positions ~= false then self:declare("wpe.weight", { seq_len, c }, "embedding") end
   -- gradients complete in backprop order: position first, then the token table, which a
   -- shared LM head has already added to
   self.ready_order = positions ~= false and { "wpe.weight", "wte.weight" } or { "wte.weight" }
   return self
end

local function forward(self, tokens, b, t)
   local y = self:buffer("y", b * t * self.c)
   check(lib.lw_embedding_forward(self.stream, y, tokens, self.w["wte.weight"],
      self.w["wpe.weight"], self.dtype["wte.weight"], b, t, self.c))
   return y
end

local function backward(self, tokens, dy, b, t)
   check(lib.lw_embedding_backward(self.stream, self.g["wte.weight"], self.g["wpe.weight"], dy,
      tokens, b, t, self.c))
end

-- tokens: int32_t* [b*t] -> float* [b*t, c]
function Embedding:forward(tokens, b, t)
   return self:with_params("forward", forward, tokens, b, t)
end

-- Accumulates into the embedding gradients. Tokens have no gradient: dx must be nil.
function Embedding:backward(tokens, dy, dx, b, t)
   if dx ~= nil then
      errors.misuse("nn.Embedding", "tokens have no gradient; grad_input must be nil")
   end
   self:with_params("backward", backward, tokens, dy, b, t)
end

return Embedding
