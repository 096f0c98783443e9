-- models/mistral.lua: a models file: the entries of the models it defines, returned (one entry,
-- or a list of them), which lw.models.load registers. Recipes load it (own_model.lua), and the
-- commands that open its checkpoints take it as `--models recipes/models/mistral.lua` (or
-- LWOPT_MODELS), so that training and the commands share one definition.
local lw = require("lwopt")

-- Mistral 7B's shape of LLaMA (v0.2 on, without the sliding window): a rotary base of 10^6,
-- 32000 tokens, a KV head per 4 heads (per head where 4 does not divide the heads). Its tensors
-- are LLaMA's, so transformers' LlamaForCausalLM holds it: `lwopt export` writes it as hf-llama.
return lw.models.derive("llama", { name = "mistral", title = "Mistral",
   defaults = { rope_base = 1e6, vocab = 32000,
      n_kv_head = function(c) return c.n_head % 4 == 0 and c.n_head / 4 or c.n_head end },
   formats = { "hf-llama" } })
