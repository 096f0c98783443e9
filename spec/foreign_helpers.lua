-- foreign_helpers.lua: what foreign_spec.lua and the --init-from specs share: a tiny GPT with
-- biases as a checkpoint and as its hf-gpt2 export, a text file to read as bytes, the validation
-- loss `lwopt eval` gives a path, a run's first step checked against the file it started from,
-- and refused recipe commands.
local ffi = require("ffi")
local assert = require("luassert")
local lw = require("lwopt")
local json = require("lwopt.json")
local trained = require("lwopt.trained")
local export = require("lwopt.export")
local presets = require("lwopt.presets")
local helpers = require("helpers")

local foreign_helpers = {}

local SHAPE = { n_layer = 2, n_embd = 16, n_head = 2, vocab = 256, seq_len = 8, bias = true }

-- A checkpoint of a tiny GPT with biases (every value different, none zero) at dir/ck, and its
-- hf-gpt2 export at dir/hf; tied: false for an untied LM head; vocab: a token vocabulary
-- (default 256: bytes). Returns both paths.
function foreign_helpers.model_files(dir, tied, vocab)
   local cfg = {}
   for k, x in pairs(SHAPE) do cfg[k] = x end
   cfg.tied = tied
   vocab = vocab or 256
   cfg.vocab = presets.vocab_rows(vocab)
   local model = lw.nn.GPT.new(cfg)
   local ddp = lw.ddp.new(model:parameters(), lw.comm.self())
   for i, s in ipairs(model:parameters()) do
      ddp:param(s.name):copy(function(k) return 0.2 * math.sin(1.3 * i + 0.07 * k) + 0.01 end)
   end
   local ckpt = lw.checkpoint.save(dir .. "/ck", { ddp = ddp, step = 1,
      opt = lw.optim.new(ddp, { lr = 1e-2 }), extra = { n_layer = 2, n_embd = 16, n_head = 2,
      vocab = vocab, seq = 8, data_kind = vocab == 256 and "bytes" or "tokens" } })
   export.run({ ckpt = ckpt, format = "hf-gpt2", out_dir = dir .. "/hf" })
   return ckpt, dir .. "/hf/model.safetensors"
end

-- A new temporary directory holding text.txt (3600 bytes of text); returns both paths.
function foreign_helpers.dir_with_text()
   local dir = helpers.tempdir()
   local text = dir .. "/text.txt"
   local f = assert(io.open(text, "wb"))
   f:write(("Of the making of many books there is no end. "):rep(80))
   f:close()
   return dir, text
end

-- `lwopt eval PATH --data DATA` over 8 validation sequences in batches of 4: the loss and the
-- command's output.
function foreign_helpers.eval_loss(path, data)
   local out, status = helpers.sh("bin/lwopt eval " .. path .. " --data " .. data
      .. " --batch 4 --eval-max 8 --json")
   if status ~= 0 then error(("lwopt eval %s: status %s\n%s"):format(path, status, out), 2) end
   return json.decode(out:match("{.*}")).val_loss, out
end

-- A recipe run --init-from file on text (batch b of t tokens, seed 1337) starts at the file's
-- model's loss on its first batch: step 1's loss in its log within 1e-5. Returns the file's
-- lwopt.trained model.
function foreign_helpers.check_first_step(log, file, text, b, t)
   local step1
   for line in io.lines(log) do
      local r = json.decode(line)
      if r.step == 1 and r.loss then step1 = r.loss end
   end
   local m = trained.open(file)
   local data = trained.open_data(text, m.settings)
   local tokens, targets = ffi.new("int32_t[?]", b * t), ffi.new("int32_t[?]", b * t)
   data:train_batch(tokens, targets, 1337, 1, 0, 0, 1, b, t)
   local want = m.model:forward(tokens, targets, b, t)
   assert.is_true(math.abs(step1 - want) < 1e-5, ("%.9f vs %.9f"):format(step1, want))
   return m
end

-- Each case { flags, message }: the recipe command with flags appended fails, saying message.
function foreign_helpers.refuses(recipe, cases)
   for _, case in ipairs(cases) do
      local out, status = helpers.sh(recipe .. case[1])
      assert.is_not.equal(0, status, out)
      assert.matches(case[2], out, 1, true)
   end
end

return foreign_helpers
