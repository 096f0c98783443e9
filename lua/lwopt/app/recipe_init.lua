-- recipe_init.lua: the model's shape for --init-from a file in another program's names
-- (hf-gpt2: OpenAI's GPT-2 as transformers saves it, or an `lwopt export`; nanogpt; hf-llama,
-- transformers' LlamaForCausalLM, for --arch llama; nanochat's, for --arch nanochat): taken from
-- the file instead of the preset, so its weights fine-tune as they are, biases and an untied
-- LM head included. A shape flag given that contradicts the file is refused by name. Files in
-- lwopt's names keep the preset's shape (init_from.lua checks them against it).
local weights = require("lwopt.weights")
local foreign = require("lwopt.foreign")
local presets = require("lwopt.presets")
local errors = require("lwopt.errors")

local recipe_init = {}

local fail = errors.failer(nil)

-- The shape's settings (v's keys), their flags, and the file's value in words.
local SHAPE = {
   { "n_layer", "--n-layer", "%d layers" },
   { "n_embd", "--n-embd", "width %d" },
   { "n_head", "--n-head", "%d attention heads" },
   { "seq", "--seq", "%d positions (the sequence length)" },
   { "mlp_hidden", "--mlp-hidden", "%d hidden channels in its MLP" },
   { "n_kv_head", "--n-kv-head", "%d KV heads" },
}

-- The vocabulary of a foreign file against the data's: v.vocab and v.vocab_rows become the
-- file's (hf-gpt2 records the tokenizer's vocabulary; nanogpt only the padded rows).
local function adopt_vocab(v, cfg, where)
   if v.data_kind == "bytes" then
      if (cfg.vocab or cfg.rows) ~= 256 then
         fail("%s holds a vocabulary of %d %s, but --data is a text file, read as bytes (256): "
            .. "give token shards of its vocabulary", where, cfg.vocab or cfg.rows,
            cfg.vocab and "tokens" or "rows")
      end
      return
   end
   if cfg.vocab then
      if v.vocab_given and v.vocab ~= cfg.vocab then
         fail("--vocab %d: %s holds a vocabulary of %d tokens", v.vocab, where, cfg.vocab)
      end
      v.vocab = cfg.vocab
   end
   v.vocab_rows = presets.vocab_rows(v.vocab)
   if v.vocab_rows ~= cfg.rows then
      fail("--vocab %d pads to %d rows, but %s has %d", v.vocab, v.vocab_rows, where, cfg.rows)
   end
   for _, id in ipairs(v.prompt_ids or {}) do
      if id >= v.vocab then
         fail("the prompt's token %d is not below %s's vocabulary of %d", id, where, v.vocab)
      end
   end
end

-- The shape flags given that contradict the file's (file: SHAPE's keys, nil where it does not
-- say) refused by name; v takes the file's values.
local function adopt_shape(v, file, where, from)
   for _, s in ipairs(SHAPE) do
      local key, flag, words = s[1], s[2], s[3]
      local want = file[key]
      if want ~= nil then
         if v.given[key] and v[key] ~= want then
            fail("%s %d: %s has %s%s", flag, v[key], where, words:format(want),
               key == "n_head" and (" (%s)"):format(from) or "")
         end
         v[key] = want
         v.from_preset[key] = nil
      end
   end
end

-- An hf-llama file's LLaMA (foreign.llama): its shape, vocabulary, tie, RMSNorm's epsilon and
-- rotary base; the sequence stays the run's (rotary positions have no table), at most the
-- file's max_position_embeddings. --rope-pairing interleaved takes its Q and K rows turned
-- (init_from.lua). Returns the line that says so.
local function adopt_llama(v, f, where)
   local cfg = foreign.llama(f, where)
   local _, from = foreign.config(f)
   if v.seq > cfg.seq_len then
      if v.given.seq then
         fail("--seq %d: %s has %d positions (its max_position_embeddings)", v.seq, where,
            cfg.seq_len)
      end
      v.seq, v.from_preset.seq = cfg.seq_len, nil
   end
   adopt_shape(v, { n_layer = cfg.n_layer, n_embd = cfg.n_embd, n_head = cfg.n_head,
      n_kv_head = cfg.n_kv_head, mlp_hidden = cfg.mlp_hidden }, where, from)
   adopt_vocab(v, { vocab = cfg.real_vocab, rows = cfg.vocab }, where)
   v.tied, v.norm_eps, v.rope_base, v.shape_from = cfg.tied, cfg.norm_eps, cfg.rope_base,
      v.init_from
   return ("the model's shape is %s's (hf-llama names): %d layers x %d, %d heads (%d KV), MLP "
      .. "%d, sequence %d, vocabulary %d, %s LM head, RMSNorm eps %g, rotary base %g"):format(
      v.init_from, v.n_layer, v.n_embd, v.n_head, v.n_kv_head, v.mlp_hidden, v.seq, v.vocab,
      cfg.tied and "a tied" or "an untied", cfg.norm_eps, cfg.rope_base)
end

-- A nanochat file's model (foreign.nanochat): its shape, vocabulary, sequence (the short
-- window is a quarter of it: the file's, not the preset's) and window pattern. Returns the line
-- that says so.
local function adopt_nanochat(v, f, where)
   local cfg = foreign.nanochat(f, where)
   local _, from = foreign.config(f)
   adopt_shape(v, { n_layer = cfg.n_layer, n_embd = cfg.n_embd, n_head = cfg.n_head,
      n_kv_head = cfg.n_kv_head, seq = cfg.seq_len }, where, from)
   adopt_vocab(v, { vocab = cfg.real_vocab, rows = cfg.vocab }, where)
   v.window_pattern, v.shape_from = cfg.window_pattern, v.init_from
   return ("the model's shape is %s's (nanochat names): %d layers x %d, %d heads (%d KV), "
      .. "sequence %d, vocabulary %d, window pattern %s"):format(v.init_from, v.n_layer,
      v.n_embd, v.n_head, v.n_kv_head, v.seq, v.vocab, cfg.window_pattern)
end

-- The model a file format holds and the one an --arch builds, in words, and the flag that fits.
local FILE_MODEL = { ["hf-llama"] = { "a LLaMA", "llama" }, nanochat = { "a nanochat model",
   "nanochat" } }
local ARCH_MODEL = { llama = "LLaMA's", nanochat = "nanochat's", gpt = "GPT-2's" }

-- recipe_init.adopt(v): after the flags' checks (recipe_flags.check), v's model shape (n_layer,
-- n_embd, n_head, seq, mlp_hidden, vocab, vocab_rows, and bias and tied for the GPT's
-- configuration) set from v.init_from's file when it is in another program's names. Returns
-- the line that says so, or nil. Every rank reads the file alike, so every rank refuses alike.
function recipe_init.adopt(v)
   if not v.init_from then return nil end
   local where = "--init-from " .. v.init_from
   local f = foreign.view(weights.open(v.init_from, where))
   local fmt = foreign.format(f)
   if fmt == "lwopt" then return nil end
   local holds = FILE_MODEL[fmt] or { "a GPT-2", "gpt" }
   -- a models file's model takes the files of the formats its entry lists
   local listed = false
   for _, name in ipairs(require("lwopt.models").get(v.arch).formats) do
      listed = listed or name == fmt
   end
   if holds[2] ~= v.arch and not listed then
      fail("%s holds %s (%s names), and --arch %s builds %s: %s", where, holds[1], fmt, v.arch,
         ARCH_MODEL[v.arch] or v.arch, holds[2] == "gpt" and ("drop --arch " .. v.arch)
         or ("add --arch " .. holds[2]))
   end
   if v.n_expert > 0 then
      fail("%s holds a dense GPT (%s's names), and --n-expert%s asks for a mixture of experts: "
         .. "add --n-expert 0", where, fmt, v.given.n_expert and "" or
         (" (--preset %s's)"):format(v.preset))
   end
   if fmt == "hf-llama" then return adopt_llama(v, f, where) end
   if fmt == "nanochat" then return adopt_nanochat(v, f, where) end
   local cfg = foreign.shape(f, fmt, where)
   local recorded, from = foreign.recorded(f, fmt)
   adopt_shape(v, { n_layer = cfg.n_layer, n_embd = cfg.n_embd, n_head = recorded.n_head,
      seq = cfg.seq_len, mlp_hidden = cfg.mlp_hidden }, where, from)
   if recorded.n_head == nil and not v.given.n_head then
      fail("%s does not record its attention heads (no config in its metadata, no config.json "
         .. "beside it): give --n-head", where)
   end
   if v.n_embd % v.n_head ~= 0 then
      fail("--n-head %d does not divide %s's width %d", v.n_head, where, v.n_embd)
   end
   -- the default MLP stays unnamed, as without --init-from
   if v.mlp_hidden == 4 * v.n_embd and not v.given.mlp_hidden then v.mlp_hidden = nil end
   adopt_vocab(v, cfg, where)
   v.bias, v.tied, v.shape_from = cfg.bias, cfg.tied, v.init_from
   return ("the model's shape is %s's (%s names): %d layers x %d, %d heads, sequence %d, "
      .. "vocabulary %d, %s, %s LM head"):format(v.init_from, fmt, v.n_layer, v.n_embd, v.n_head,
      v.seq, v.vocab, cfg.bias and "biases" or "no biases", cfg.tied and "a tied" or "an untied")
end

return recipe_init
