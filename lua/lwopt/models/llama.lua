-- models/llama.lua: the registry's entry for LLaMA-style models (LLaMA 3's architecture, from
-- Meta's published model: token embedding without positions, RMSNorm with a gain before the
-- attention and the MLP and at the end, rotary embeddings on Q and K (Hugging Face's pairing by
-- halves), grouped-query attention, a SwiGLU MLP, no biases, an untied head). It is nn.GPT
-- built with those parts (docs/parts.md), so every runtime choice GPT has applies.
local models = require("lwopt.models")

-- GPT's fields with LLaMA's defaults: the parts above, RoPE base 500000 (LLaMA 3's), the MLP's
-- hidden width 8/3 n_embd rounded up to a multiple of 64 (LLaMA's rule for its width).
return models.derive("gpt", { name = "llama", title = "LLaMA", formats = { "hf-llama" }, defaults = {
   norm = "rmsnorm", position = "rotary", activation = "swiglu", tied = false, bias = false,
   rope_base = 500000, vocab = 128256,
   mlp_hidden = function(c) return 64 * math.ceil(8 * c.n_embd / 3 / 64) end } })
