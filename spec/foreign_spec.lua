-- foreign_spec.lua: GPTs in another program's names (hf-gpt2 with biases that are not zero,
-- written by `lwopt export` from a tiny lwopt model) read by `lwopt eval` and `lwopt sample`
-- as the model they came from, and fine-tuned by the recipe's --init-from with the model's
-- shape taken from the file; a flag that contradicts a file's settings refused by name (the
-- settings of a --save-params file too); numpy's GPT-2 (tests/export/check_hf.py) on the biases.
local lw = require("lwopt")
local ffi = require("ffi")
local json = require("lwopt.json")
local export = require("lwopt.export")
local trained = require("lwopt.trained")
local safetensors = require("lwopt.safetensors")
local weights = require("lwopt.weights")
local helpers = require("helpers")

local SHAPE = { n_layer = 2, n_embd = 16, n_head = 2, vocab = 256, seq_len = 8, bias = true }

-- A checkpoint of a tiny GPT with biases (every value different, none zero) at dir/ck, and its
-- hf-gpt2 export at dir/hf; tied: false for an untied LM head. Returns both paths.
local function model_files(dir, tied)
   local cfg = {}
   for k, x in pairs(SHAPE) do cfg[k] = x end
   cfg.tied = tied
   local model = lw.nn.GPT.new(cfg)
   local ddp = lw.ddp.new(model:parameters(), lw.comm.self())
   for i, s in ipairs(model:parameters()) do
      ddp:param(s.name):copy(function(k) return 0.2 * math.sin(1.3 * i + 0.07 * k) + 0.01 end)
   end
   local ckpt = lw.checkpoint.save(dir .. "/ck", { ddp = ddp, step = 1,
      opt = lw.optim.new(ddp, { lr = 1e-2 }), extra = { n_layer = 2, n_embd = 16, n_head = 2,
      vocab = 256, seq = 8, data_kind = "bytes" } })
   export.run({ ckpt = ckpt, format = "hf-gpt2", out_dir = dir .. "/hf" })
   return ckpt, dir .. "/hf/model.safetensors"
end

local function eval_loss(path, data, extra)
   local out, status = helpers.sh("bin/lwopt eval " .. path .. " --data " .. data
      .. " --batch 4 --eval-max 8 --json " .. (extra or ""))
   assert.equal(0, status, out)
   return json.decode(out:match("{.*}")).val_loss, out
end

describe("a GPT in another program's names", function()
   local dir, text
   before_each(function()
      dir = os.tmpname()
      os.remove(dir)
      os.execute("mkdir -p " .. dir)
      text = dir .. "/text.txt"
      local f = assert(io.open(text, "wb"))
      f:write(("Of the making of many books there is no end. "):rep(80))
      f:close()
   end)
   after_each(function() os.execute("rm -rf " .. dir) end)

   it("is read by eval and sample as the model it came from, biases kept", function()
      for _, tied in ipairs({ true, false }) do
         os.execute("rm -rf " .. dir .. "/ck " .. dir .. "/hf")
         local ckpt, hf = model_files(dir, tied)
         local mine = eval_loss(ckpt, text)
         local theirs, out = eval_loss(hf, text)
         assert.is_true(math.abs(mine - theirs) < 1e-6, ("%.9f vs %.9f"):format(mine, theirs))
         assert.matches("note: hf-gpt2 names: Conv1D weights transposed back, biases kept",
            out, 1, true)
         local a, sa = helpers.sh("bin/lwopt sample " .. ckpt .. " --tokens 24 --seed 5")
         local b, sb = helpers.sh("bin/lwopt sample " .. hf .. " --tokens 24 --seed 5")
         assert.equal(0, sa, a)
         assert.equal(0, sb, b)
         assert.equal(a:match("sample:\n.*$"), b:match("sample:\n.*$"))
         assert.is_not_nil(a:match("sample:\n.*$"))
      end
      -- the model's own: the parameters as the checkpoint holds them, LM head untied
      local t = trained.open(dir .. "/hf/model.safetensors")
      assert.is_true(t.cfg.bias)
      assert.is_false(t.cfg.tied)
      assert.equal(2, t.cfg.n_head)
   end)

   it("reads the hub's GPT-2 layout: no 'transformer.' prefix, causal masks beside", function()
      local ckpt, hf = model_files(dir, true)
      local f = weights.open(hf, hf)
      local list = {}
      for _, name in ipairs(f.order) do
         list[#list + 1] = { name = (name:gsub("^transformer%.", "")), shape = f.shapes[name],
            data = weights.read(f, name) }
         local layer = name:match("^transformer%.h%.(%d+)%.ln_1%.weight$")
         if layer then
            local mask = ffi.new("float[64]")
            for k = 0, 63 do mask[k] = k % 8 <= math.floor(k / 8) and 1 or 0 end
            list[#list + 1] = { name = "h." .. layer .. ".attn.bias", shape = { 1, 1, 8, 8 },
               data = mask }
         end
      end
      -- no metadata: config.json beside it says the heads, as on the hub
      local hub = dir .. "/hf/hub.safetensors"
      safetensors.write(hub, list)
      local mine, theirs = eval_loss(ckpt, text), eval_loss(hub, text)
      assert.is_true(math.abs(mine - theirs) < 1e-6, ("%.9f vs %.9f"):format(mine, theirs))
      local out, status = helpers.sh("luajit recipes/gpt_small.lua --preset tiny --steps 1 "
         .. "--sample 0 --quiet --data " .. text .. " --init-from " .. hub)
      assert.equal(0, status, out)
      assert.matches("initialised from " .. hub .. ": 28 tensors by hf-gpt2's names", out, 1,
         true)
   end)

   it("pads GPT-2's vocabulary with zero rows; reads nanoGPT's names", function()
      local cfg = { n_layer = 1, n_embd = 8, n_head = 2, vocab = 50304, seq_len = 4, bias = true }
      local model = lw.nn.GPT.new(cfg)
      local ddp = lw.ddp.new(model:parameters(), lw.comm.self())
      for i, s in ipairs(model:parameters()) do
         ddp:param(s.name):copy(function(k) return math.cos(0.3 * i + 0.01 * k) end)
      end
      local ckpt = lw.checkpoint.save(dir .. "/ck", { ddp = ddp, step = 1,
         opt = lw.optim.new(ddp, { lr = 1e-2 }), extra = { n_layer = 1, n_embd = 8, n_head = 2,
         vocab = 50257, seq = 4, data_kind = "tokens" } })
      export.run({ ckpt = ckpt, format = "hf-gpt2", out_dir = dir .. "/hf" })
      export.run({ ckpt = ckpt, format = "nanogpt", out_dir = dir .. "/ng" })
      local notes = {}
      local t = trained.open(dir .. "/hf/model.safetensors",
         { note = function(line) notes[#notes + 1] = line end })
      assert.same({ "hf-gpt2 names: Conv1D weights transposed back, biases kept" }, notes)
      assert.equal(50257, t.settings.vocab)
      assert.equal("tokens", t.settings.kind)
      assert.equal(50304, t.cfg.vocab)
      for _, s in ipairs(ddp.specs) do
         local want, got = ddp:param(s.name), t.ddp:param(s.name)
         for k = 0, got.numel - 1 do
            local padding = s.name == "wte.weight" and k >= 50257 * 8
            assert.equal(padding and 0 or want.data[k], got.data[k], s.name)
         end
      end
      -- nanoGPT keeps the padded rows and records none of the tokenizer's vocabulary
      t = trained.open(dir .. "/ng/model.safetensors", { note = function() end })
      assert.equal(50257, t.settings.vocab)
      for _, s in ipairs(ddp.specs) do
         assert.same(ddp:param(s.name):totable(), t.ddp:param(s.name):totable(), s.name)
      end
   end)

   it("refuses a flag that contradicts what the file records, naming both", function()
      local _, hf = model_files(dir, true)
      local out, status = helpers.sh("bin/lwopt eval " .. hf .. " --data " .. text
         .. " --n-head 4")
      assert.equal(1, status, out)
      assert.matches("lwopt eval: --n-head 4: " .. hf .. " records 2 (its metadata's config)",
         out, 1, true)
      out, status = helpers.sh("bin/lwopt sample " .. hf .. " --vocab 300")
      assert.equal(1, status, out)
      assert.matches("lwopt sample: --vocab 300: " .. hf .. " holds 256 tokens (its token "
         .. "embedding's rows)", out, 1, true)
      -- without the config in its metadata, config.json beside it says the heads
      local f = weights.open(hf, hf)
      local list = {}
      for _, name in ipairs(f.order) do
         list[#list + 1] = { name = name, shape = f.shapes[name], data = weights.read(f, name) }
      end
      safetensors.write(dir .. "/hf/bare.safetensors", list)
      out, status = helpers.sh("bin/lwopt eval " .. dir .. "/hf/bare.safetensors --data " .. text
         .. " --n-head 8")
      assert.equal(1, status, out)
      assert.matches("--n-head 8: " .. dir .. "/hf/bare.safetensors records 2 (" .. dir
         .. "/hf/config.json)", out, 1, true)
   end)

   it("honours the settings a --save-params file records: its heads", function()
      local params = dir .. "/p.safetensors"
      local recipe = "luajit recipes/gpt_small.lua --preset tiny --steps 1 --sample 0 --quiet "
         .. "--n-head 2 --data " .. text .. " --seq 16 "
      local out, status = helpers.sh(recipe .. "--save-params " .. params)
      assert.equal(0, status, out)
      out, status = helpers.sh("bin/lwopt eval " .. params .. " --data " .. text .. " --n-head 4")
      assert.equal(1, status, out)
      assert.matches("--n-head 4: " .. params .. " records 2 (its lwopt settings)", out, 1, true)
      -- the recorded heads, not the preset's 4
      local _, said = eval_loss(params, text)
      assert.matches("model: " .. params .. ": GPT 4 layers x 64, 2 heads, sequence 16, bytes",
         said, 1, true)
   end)

   it("is fine-tuned by --init-from in the file's shape, saved, resumed and read back", function()
      local _, hf = model_files(dir, true)
      local recipe = "luajit recipes/gpt_small.lua --preset tiny --sample 0 --quiet --data "
         .. text .. " --init-from " .. hf .. " --warmup 1 --ckpt-dir " .. dir .. "/run "
      local out, status = helpers.sh(recipe .. "--steps 2 --stop-after 1 --log " .. dir
         .. "/log.jsonl")
      assert.equal(0, status, out)
      assert.matches("the model's shape is " .. hf .. "'s (hf-gpt2 names): 2 layers x 16, 2 "
         .. "heads, sequence 8, vocabulary 256, biases, a tied LM head\n", out, 1, true)
      assert.matches("initialised from " .. hf .. ": 28 tensors by hf-gpt2's names (Conv1D "
         .. "weights transposed back), F32", out, 1, true)
      -- step 1's loss is the file's model's on the run's first batch (batch 8, seed 1337)
      local step1
      for line in io.lines(dir .. "/log.jsonl") do
         local r = json.decode(line)
         if r.step == 1 and r.loss then step1 = r.loss end
      end
      local t = trained.open(hf)
      local data = trained.open_data(text, t.settings)
      local tokens, targets = ffi.new("int32_t[64]"), ffi.new("int32_t[64]")
      data:train_batch(tokens, targets, 1337, 1, 0, 0, 1, 8, 8)
      local want = t.model:forward(tokens, targets, 8, 8)
      assert.is_true(math.abs(step1 - want) < 1e-5, ("%.9f vs %.9f"):format(step1, want))
      -- the biases are AdamW's parameters and trained
      out, status = helpers.sh(recipe .. "--steps 2 --resume")
      assert.equal(0, status, out)
      assert.matches("resumed from " .. dir .. "/run/step-000000001", out, 1, true)
      local tuned = trained.open(dir .. "/run")
      assert.equal(2, tuned.step)
      assert.is_true(tuned.cfg.bias)
      local a, b = t.ddp:param("h.0.attn.qkv.bias"):totable(),
         tuned.ddp:param("h.0.attn.qkv.bias"):totable()
      assert.are_not.same(a, b)
      -- without --init-from the preset's shape cannot continue it, and says why
      out, status = helpers.sh("luajit recipes/gpt_small.lua --preset tiny --sample 0 --quiet "
         .. "--data " .. text .. " --steps 3 --ckpt-dir " .. dir .. "/run --resume")
      assert.equal(1, status, out)
      assert.matches("this run has --preset tiny (4 layers x 64, 4 heads), but the checkpoint's "
         .. "model is --init-from " .. hf .. "'s shape (2 layers x 16, 2 heads)", out, 1, true)
      local loss = eval_loss(dir .. "/run", text)
      assert.is_true(loss > 0 and loss < 10)
   end)

   it("refuses a shape flag that contradicts the --init-from file, by name", function()
      local _, hf = model_files(dir, true)
      local recipe = "luajit recipes/gpt_small.lua --preset tiny --steps 1 --sample 0 --quiet "
         .. "--data " .. text .. " --init-from " .. hf
      for _, case in ipairs({
         { " --n-layer 3", "--n-layer 3: --init-from " .. hf .. " has 2 layers" },
         { " --n-head 4", "--n-head 4: --init-from " .. hf .. " has 2 attention heads (its "
           .. "metadata's config)" },
         { " --seq 16", "--seq 16: --init-from " .. hf .. " has 8 positions (the sequence "
           .. "length)" },
      }) do
         local out, status = helpers.sh(recipe .. case[1])
         assert.is_not.equal(0, status, out)
         assert.matches(case[2], out, 1, true)
      end
   end)

   it("gives numpy's GPT-2 (check_hf.py) lwopt's loss with biases", function()
      local _, missing = helpers.sh("/usr/bin/python3 -c 'import numpy'")
      if missing ~= 0 then
         pending("/usr/bin/python3 cannot import numpy")
         return
      end
      local ckpt = model_files(dir, true)
      local out, status = helpers.sh("/usr/bin/python3 tests/export/check_hf.py " .. ckpt .. " "
         .. dir .. "/hf hf-gpt2 bin/lwopt")
      assert.equal(0, status, out)
      assert.matches("hf-gpt2: 28 tensors equal the checkpoint's", out, 1, true)
   end)
end)
