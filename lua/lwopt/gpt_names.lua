-- gpt_names.lua: lwopt's dense GPT (lw.arch.gpt's names, nn.Linear's [out, in] weights, the
-- vocabulary padded) as other programs name and lay it out: Hugging Face's GPT-2 (transformers'
-- GPT2LMHeadModel: Conv1D weights [in, out], biases everywhere, the real vocabulary) and nanoGPT
-- (its GPT's state dict: nn.Linear weights, biases only with bias=True, the padded vocabulary,
-- lm_head tied to the token embedding). One list per format drives both directions: `lwopt
-- export` (lwopt -> theirs) and the recipe's --init-from (theirs -> lwopt). Pure Lua, no data.
local names = {}

names.FORMATS = { "hf-gpt2", "nanogpt" }

-- What each format is, for messages and metadata.
names.ABOUT = {
   ["hf-gpt2"] = "Hugging Face GPT-2 (transformers GPT2LMHeadModel)",
   nanogpt = "nanoGPT (model.py's GPT state dict)",
}

-- names.map(format, cfg): the tensors of a file in that format, in the format's order, for a
-- model cfg = { n_layer, n_embd, vocab (the tokenizer's, real), rows (the model's vocabulary,
-- padded), seq_len, tied, bias, mlp_hidden }. Each entry: { name, shape (theirs), from (the
-- lwopt parameter it holds; nil: zeros, a bias lwopt's model does not have), transpose (theirs
-- is lwopt's [out, in] transposed, [in, out]), rows (theirs holds the first `rows` rows of
-- lwopt's tensor: the vocabulary unpadded), alias (a second copy of a tied tensor: written,
-- not read back) }. Returns nil and why when the format cannot hold the model.
function names.map(format, cfg)
   local c, h = cfg.n_embd, cfg.mlp_hidden or 4 * cfg.n_embd
   local hf = format == "hf-gpt2"
   if not hf and format ~= "nanogpt" then
      return nil, ("unknown format '%s' (%s)"):format(tostring(format),
         table.concat(names.FORMATS, ", "))
   end
   if not hf and h ~= 4 * c then
      return nil, ("nanoGPT's MLP has 4 x n_embd = %d hidden channels, this model %d"):format(
         4 * c, h)
   end
   if not hf and not cfg.tied then
      return nil, "nanoGPT ties its LM head to the token embedding, and this model's is untied"
   end
   local vocab = hf and cfg.vocab or cfg.rows
   local list = {}
   local function add(name, shape, from, extra)
      local e = { name = name, shape = shape, from = from }
      for k, v in pairs(extra or {}) do e[k] = v end
      list[#list + 1] = e
   end
   -- a bias: lwopt's when it has them; Hugging Face's GPT-2 always has one (zeros here)
   local function bias(name, n, from)
      if cfg.bias then
         add(name, { n }, from)
      elseif hf then
         add(name, { n }, nil)
      end
   end
   local function norm(theirs, ours)
      add(theirs .. ".weight", { c }, ours .. ".weight")
      bias(theirs .. ".bias", c, ours .. ".bias")
   end
   -- Conv1D (hf-gpt2) stores [in, out]; nn.Linear (lwopt, nanoGPT) [out, in]
   local function linear(theirs, ours, n_out, n_in)
      add(theirs .. ".weight", hf and { n_in, n_out } or { n_out, n_in }, ours .. ".weight",
         { transpose = hf })
      bias(theirs .. ".bias", n_out, ours .. ".bias")
   end
   add("transformer.wte.weight", { vocab, c }, "wte.weight", { rows = vocab })
   add("transformer.wpe.weight", { cfg.seq_len, c }, "wpe.weight")
   for i = 0, cfg.n_layer - 1 do
      local theirs, ours = "transformer.h." .. i .. ".", "h." .. i .. "."
      norm(theirs .. "ln_1", ours .. "ln_1")
      linear(theirs .. "attn.c_attn", ours .. "attn.qkv", 3 * c, c)
      linear(theirs .. "attn.c_proj", ours .. "attn.proj", c, c)
      norm(theirs .. "ln_2", ours .. "ln_2")
      linear(theirs .. "mlp.c_fc", ours .. "mlp.fc", h, c)
      linear(theirs .. "mlp.c_proj", ours .. "mlp.proj", c, h)
   end
   norm("transformer.ln_f", "ln_f")
   if not cfg.tied then
      add("lm_head.weight", { vocab, c }, "lm_head.weight", { rows = vocab })
   elseif not hf then
      -- nanoGPT's state dict holds the tied weight under both names (load_state_dict wants both)
      add("lm_head.weight", { vocab, c }, "wte.weight", { rows = vocab, alias = true })
   end
   -- Hugging Face's GPT-2 files leave a tied lm_head.weight out: transformers ties it on load
   return list
end

-- Which format a file of tensor names is in: "lwopt" (lw.arch.gpt's names), "hf-gpt2" or
-- "nanogpt" (told apart by the first attention weight's shape: [in, out] or [out, in]), from
-- has(name) -> shape or nil.
function names.detect(has)
   if has("transformer.wte.weight") == nil then return "lwopt" end
   local wte, qkv = has("transformer.wte.weight"), has("transformer.h.0.attn.c_attn.weight")
   if qkv and #qkv == 2 and qkv[1] == wte[2] and qkv[2] ~= wte[2] then return "hf-gpt2" end
   return "nanogpt"
end

return names
