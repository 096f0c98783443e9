-- Parameter specs (name, shape {out, in}, dtype, role) in forward order; no tensors are
-- allocated here; layout and routing consume the specs. Every model's are its modules'
-- declarations, asked of the model registry (lw.models.specs(name, cfg): LLaMA's, a mixture of
-- experts of either model, any TP rank's shards); arch.gpt is GPT-2's under the name the
-- library has always given it, and arch.numel counts a list of specs.

local errors = require("lwopt.errors")
local models = require("lwopt.models")

local arch = {}

-- arch.gpt{ the fields of lw.nn.GPT's config (lw.models' gpt), dtype, tp, tp_rank }: the
-- specs lw.nn.GPT declares for that config, from its modules (lw.models.specs): with tp = t
-- above 1 (a dense model), TP rank tp_rank's shards: column-parallel weights {out / t, in}
-- (attn.qkv with blocks 3: this rank's heads' Q, K and V; mlp.fc) and their biases,
-- row-parallel weights {out, in / t} (attn.proj, mlp.proj), the vocabulary-parallel token
-- table (and untied LM head) {ceil(vocab / t), n_embd} (the vocabulary padded to a multiple of
-- t), each with tp = { dim, blocks } and full_shape (lw.tp says what they mean); the norms, the
-- position table and the row-parallel biases whole, without a tp field.
function arch.gpt(cfg)
   local ok, specs = pcall(models.specs, "gpt", cfg, "lw.arch.gpt")
   if not ok then errors.misuse(nil, "%s", specs) end
   return specs
end

-- Total element count of a list of specs.
function arch.numel(specs)
   local total = 0
   for _, s in ipairs(specs) do
      local k = 1
      for _, d in ipairs(s.shape) do k = k * d end
      total = total + k
   end
   return total
end

return arch
