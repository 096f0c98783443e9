-- models/llama.lua: the registry's entry for LLaMA-style models (LLaMA 3's architecture, from
-- Meta's published model: token embedding without positions, RMSNorm with a gain before the
-- attention and the MLP and at the end, rotary embeddings on Q and K (Hugging Face's pairing by
-- halves), grouped-query attention, a SwiGLU MLP, no biases, an untied head). It is nn.GPT
-- built with those parts (docs/parts.md), so every runtime choice GPT has applies.
local GPT = require("lwopt.nn.gpt")
local gpt = require("lwopt.models.gpt")

-- GPT's fields with LLaMA's defaults: the parts above, RoPE base 500000 (LLaMA 3's), the MLP's
-- hidden width 8/3 n_embd rounded up to a multiple of 64 (LLaMA's rule for its width).
local DEFAULTS = { norm = "rmsnorm", position = "rotary", activation = "swiglu", tied = false,
   bias = false, rope_base = 500000, vocab = 128256 }
local fields = {}
for i, f in ipairs(GPT.fields) do
   local copy = { f[1], f[2], f[3], f[4] }
   if DEFAULTS[f[1]] ~= nil then copy[3] = DEFAULTS[f[1]] end
   if f[1] == "mlp_hidden" then
      copy[3] = function(c) return 64 * math.ceil(8 * c.n_embd / 3 / 64) end
   end
   fields[i] = copy
end

return {
   name = "llama",
   fields = fields,
   check = GPT.check,
   -- nn.GPT over run's groups, as GPT-2's entry builds it
   build = gpt.build,
   describe = function(c)
      return ("LLaMA %d layers x %d, %d heads (%d KV), sequence %d%s"):format(c.n_layer,
         c.n_embd, c.n_head, c.n_kv_head, c.seq_len, c.n_expert > 0 and
         (", %d experts, top-%d"):format(c.n_expert, c.topk) or "")
   end,
}
