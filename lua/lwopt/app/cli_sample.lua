-- cli_sample.lua: `lwopt sample`: text from a trained model (a checkpoint or a bare .safetensors
-- file, lwopt.trained), drawn as the recipe draws its sample at the end of training
-- (lwopt.sampling): with the checkpoint's seed and the recipe's defaults it prints the text the
-- training run printed. Token ids are printed as ids, or as text with --tokenizer; a BPE
-- tokenizer (lwopt.bpe) also encodes a text --prompt.
local trained = require("lwopt.trained")
local cli_trained = require("lwopt.app.cli_trained")
local sampling = require("lwopt.sampling")
local errors = require("lwopt.errors")

local cli_sample = {}

local USAGE = [[
usage: lwopt sample CHECKPOINT|FILE.safetensors [flags]
  CHECKPOINT: a step-N directory, or a --ckpt-dir (the checkpoint its latest file names). With the
  checkpoint's settings (seed, prompt, 200 tokens, temperature 0.8) it prints the sample the
  training run printed at its end; token data needs --data (the default prompt is its first
  validation tokens) or --prompt-ids.]]

local function flag_list()
   local list = {
      { "prompt", "string", nil, "text to continue (default '" .. sampling.BYTE_PROMPT .. "'); on "
        .. "token data encoded by --tokenizer, a BPE tokenizer's files" },
      { "prompt-ids", "string", nil, "token data: the prompt as token ids, 1,2,3 (default: the "
        .. "first " .. sampling.PROMPT_TOKENS .. " validation tokens of --data)" },
      { "tokens", "int", sampling.COUNT, "characters (token data: tokens) to generate", min = 1,
        max = 1e6 },
      { "temperature", "number", sampling.TEMPERATURE, "draw with probability p ^ (1 / T)",
        above = 0 },
      { "top-k", "int", nil, "draw among the k likeliest only (default: all)", min = 1 },
      { "seed", "int", nil, "seed of the draws (default: the checkpoint's --seed, as at the end "
        .. "of training; " .. trained.DEFAULTS.seed .. " for a bare file)", min = 0 },
      { "tokenizer", "string", nil, "token data: the tokenizer that prints text instead of token "
        .. "ids: llm.c's gpt2_tokenizer.bin, or a BPE tokenizer (lwopt's tokenizer file, "
        .. "tokenizer.json, GPT-2's vocab.json and merges.txt), which also encodes --prompt" },
      { "data", "string", nil, "the data the model was trained on: token data's default prompt "
        .. "(its first validation tokens); for bytes, the bytes a sample draws among, when the "
        .. "checkpoint does not record them" },
      { "val-data", "string", nil, "validation token shards, as the recipe's --val-data" },
   }
   for _, f in ipairs(cli_trained.flags) do list[#list + 1] = f end
   list[#list + 1] = { "help", "bool", false, "this text" }
   return list
end

local fail = errors.failer(nil)

-- What the sample draws among and from, for a model of bytes: the prompt text, and the bytes of
-- the training text (--data's, else the checkpoint's record, else all of them, said).
local function bytes_sample(v, t, spec, note)
   for _, name in ipairs({ "prompt_ids", "tokenizer", "val_data" }) do
      if v[name] then
         fail("--%s is for a model of token data; this one was trained on bytes (its prompt: "
            .. "--prompt TEXT)", name:gsub("_", "-"))
      end
   end
   spec.prompt = v.prompt or sampling.BYTE_PROMPT
   if spec.prompt == "" then fail("--prompt: the sample needs a prompt of one byte or more") end
   if v.data then
      spec.allowed = sampling.bytes_seen(trained.open_data(v.data, t.settings))
   else
      spec.allowed = t.settings.bytes_seen
      if spec.allowed == nil then
         note("the checkpoint does not record which bytes its training text holds: drawing among "
            .. "all 256 (--data FILE, the text it was trained on, draws as training did)")
      end
   end
end

-- The prompt of a model of token data: --prompt encoded by --tokenizer, --prompt-ids, or
-- --data's first validation tokens; the tokenizer that decodes the sample, with --tokenizer.
local function tokens_sample(v, t, spec)
   local s = t.settings
   if v.tokenizer then
      spec.tokenizer = require("lwopt.tokenizer").load(v.tokenizer)
      if spec.tokenizer.vocab < s.vocab then
         fail("--tokenizer %s has %d tokens, fewer than the model's vocabulary (%d): another "
            .. "tokenizer?", v.tokenizer, spec.tokenizer.vocab, s.vocab)
      end
   end
   if v.prompt then
      if spec.tokenizer == nil or spec.tokenizer.encode == nil then
         fail("--prompt '%s': a text prompt on token data is encoded by a BPE tokenizer: give "
            .. "--tokenizer (lwopt's tokenizer file, tokenizer.json, or GPT-2's vocab.json and "
            .. "merges.txt; llm.c's gpt2_tokenizer.bin holds no merges), or the prompt's ids with "
            .. "--prompt-ids 1,2,3", v.prompt)
      end
      spec.prompt = spec.tokenizer:encode(v.prompt)
      if #spec.prompt == 0 then fail("--prompt: the sample needs a prompt of one token or more") end
      for _, id in ipairs(spec.prompt) do
         if id >= s.vocab then
            fail("--prompt '%s' encodes to token %d, outside the model's vocabulary (%d)",
               v.prompt, id, s.vocab)
         end
      end
      spec.prompt_from = ("'%s', %d tokens"):format(v.prompt, #spec.prompt)
   elseif v.prompt_ids then
      spec.prompt = sampling.parse_ids(v.prompt_ids, s.vocab, "--prompt-ids")
   elseif v.data then
      local data = trained.open_data(v.data, s, v.val_data)
      spec.prompt, spec.prompt_from = sampling.default_token_prompt(data, s.seq)
   else
      fail("a model of token data needs a prompt: --prompt-ids 1,2,3, or --data with the shards it "
         .. "was trained on (the recipe's prompt is their first %d validation tokens)",
         sampling.PROMPT_TOKENS)
   end
end

local function sample(v, path, job)
   local t = cli_trained.open(v, path, job)
   local s = t.settings
   local spec = { kind = s.kind, count = v.tokens, seq = s.seq, seed = v.seed or s.seed,
                  vocab = s.vocab, temperature = v.temperature, top_k = v.top_k }
   if s.kind == "tokens" then tokens_sample(v, t, spec) else bytes_sample(v, t, spec, job.note) end
   -- below ZeRO-3 a forward pass needs no other rank: rank 0 samples, the others are done (no
   -- barrier: a long sample would outlast the collectives' watchdog)
   if job.comm.rank == 0 then job.say(sampling.text(t.model, spec)) end
end

-- lwopt sample PATH [flags]: the exit status.
function cli_sample.main(argv, out, err)
   return cli_trained.main({ name = "sample", usage = USAGE, flags = flag_list(), work = sample,
      check = function(v)
         if v.prompt and v.prompt_ids then
            return "--prompt and --prompt-ids both give the prompt: choose one"
         end
      end }, argv, out, err)
end

return cli_sample
