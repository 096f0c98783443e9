-- foreign_spec.lua: lwopt.foreign through `lwopt eval`, `lwopt sample` and lwopt.trained: GPTs in
-- another program's names (hf-gpt2 with biases that are not zero, written by `lwopt export`
-- from a tiny lwopt model; the hub's layout; GPT-2's vocabulary; nanoGPT's names) read as the
-- model they came from; a flag that contradicts a file's settings refused naming both values
-- (a --save-params file's too); numpy's GPT-2 (tests/export/check_hf.py) on the biases. The
-- recipe's --init-from in the file's shape: recipe_init_spec.lua.
local lw = require("lwopt")
local ffi = require("ffi")
local export = require("lwopt.export")
local trained = require("lwopt.trained")
local safetensors = require("lwopt.safetensors")
local weights = require("lwopt.weights")
local helpers = require("helpers")
local fh = require("foreign_helpers")

local model_files, eval_loss = fh.model_files, fh.eval_loss

describe("a GPT in another program's names", function()
   local dir, text
   before_each(function() dir, text = fh.dir_with_text() end)
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

   it("honours the settings a --save-params file or a checkpoint's parameters record", function()
      local params = dir .. "/p.safetensors"
      local recipe = "luajit recipes/gpt_small.lua --preset tiny --steps 1 --sample 0 --quiet "
         .. "--n-head 2 --data " .. text .. " --seq 16 --ckpt-dir " .. dir .. "/ck "
      local out, status = helpers.sh(recipe .. "--save-params " .. params)
      assert.equal(0, status, out)
      out, status = helpers.sh("bin/lwopt eval " .. params .. " --data " .. text .. " --n-head 4")
      assert.equal(1, status, out)
      assert.matches("--n-head 4: " .. params .. " records 2 (its lwopt settings)", out, 1, true)
      -- the recorded heads, not the preset's 4
      local _, said = eval_loss(params, text)
      assert.matches("model: " .. params .. ": GPT 4 layers x 64, 2 heads, sequence 16, bytes",
         said, 1, true)
      -- a checkpoint's model.safetensors: the manifest beside it
      local step = dir .. "/ck/step-000000001"
      out, status = helpers.sh("bin/lwopt eval " .. step .. "/model.safetensors --data " .. text
         .. " --n-head 4")
      assert.equal(1, status, out)
      assert.matches("--n-head 4: " .. step .. "/model.safetensors records 2 (" .. step
         .. "/manifest.json)", out, 1, true)
      assert.equal(eval_loss(step, text), (eval_loss(step .. "/model.safetensors", text)))
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
