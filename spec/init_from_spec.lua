-- init_from_spec.lua: the recipe's --init-from (lua/lwopt/init_from.lua) on one rank: lwopt's
-- names in F32, BF16 and F16 into the parameters, `lwopt export`'s hf-gpt2 and nanogpt files
-- read back, and a one-line refusal for every mismatch; through the recipe, the start-up line
-- and --resume's precedence. Other ranks, ZeRO levels, --ep and --tp: tests/lua/init_from.lua.
local ffi = require("ffi")
local lw = require("lwopt")
local init_from = require("lwopt.init_from")
local export = require("lwopt.export")
local safetensors = require("lwopt.safetensors")
local helpers = require("helpers")

-- A GPT of 2 layers x 16, 2 heads, 32 rows, its one-rank buffers, every value different.
local function setup(o)
   o = o or {}
   local model = lw.nn.GPT.new{ n_layer = 2, n_embd = 16, n_head = 2, vocab = 32, seq_len = 8,
      bias = o.bias or false }
   local ddp = lw.ddp.new(model:parameters(), lw.comm.self())
   for i, s in ipairs(model:parameters()) do
      ddp:param(s.name):copy(function(k) return (o.scale or 1) * math.sin(1.3 * i + 0.07 * k) end)
   end
   return model, ddp
end

local function load(path, model, ddp, vocab)
   return init_from.load(path, { ddp = ddp, comm = lw.comm.self(), cfg = model.cfg,
      vocab = vocab or 32 })
end

local function error_of(fn)
   local ok, err = pcall(fn)
   assert.is_false(ok)
   return tostring(err)
end

-- ddp's parameters as a file of lwopt's names; edit(list) may change the list first.
local function write_params(path, ddp, edit)
   local list = {}
   for _, s in ipairs(ddp.specs) do
      list[#list + 1] = { name = s.name, shape = s.shape, data = ddp:param(s.name).data }
   end
   if edit then edit(list) end
   safetensors.write(path, list)
end

describe("--init-from", function()
   local dir
   before_each(function() dir = helpers.tempdir() end)
   after_each(function() os.execute("rm -rf " .. dir) end)

   it("writes F32 tensors by lwopt's names into the parameters and says so", function()
      local _, source = setup()
      write_params(dir .. "/w.safetensors", source)
      local model, ddp = setup({ scale = 0.5 })
      local line = load(dir .. "/w.safetensors", model, ddp)
      assert.equal("initialised from " .. dir .. "/w.safetensors: 15 tensors by lwopt's names, "
         .. "F32; the optimizer starts fresh", line)
      for _, s in ipairs(ddp.specs) do
         assert.same(source:param(s.name):totable(), ddp:param(s.name):totable(), s.name)
      end
   end)

   it("widens BF16 and F16 tensors to fp32 exactly", function()
      -- bit patterns and their values: 1, -2, 3.140625 / 1/3 in half, 2^-24, 65504, -0
      local cases = {
         BF16 = { { 0x3f80, 1 }, { 0xc000, -2 }, { 0x4049, 3.140625 }, { 0x0000, 0 } },
         F16 = { { 0x3c00, 1 }, { 0x3555, 0.333251953125 }, { 0x0001, 2 ^ -24 },
                 { 0x7bff, 65504 }, { 0x8000, 0 } },
      }
      for dtype, bits in pairs(cases) do
         local model, ddp = setup()
         local list = {}
         for _, s in ipairs(ddp.specs) do
            local n = lw.tp.numel(s.shape)
            local data = ffi.new("uint16_t[?]", n)
            for k = 0, n - 1 do data[k] = bits[k % #bits + 1][1] end
            list[#list + 1] = { name = s.name, shape = s.shape, data = data, dtype = dtype }
         end
         safetensors.write(dir .. "/h.safetensors", list)
         local line = load(dir .. "/h.safetensors", model, ddp)
         assert.matches(dtype .. ", widened to fp32;", line, 1, true)
         for _, s in ipairs(ddp.specs) do
            local p = ddp:param(s.name)
            for k = 0, p.numel - 1 do assert.equal(bits[k % #bits + 1][2], p.data[k]) end
         end
      end
   end)

   it("refuses a missing, extra, misshapen or non-float tensor and a bad file in one line",
      function()
      local model, ddp = setup()
      local path = dir .. "/w.safetensors"
      local where = "--init-from " .. path .. ": "
      local cases = {
         { function(list) table.remove(list, 4) end, where .. "no tensor 'h.0.attn.qkv.weight' "
           .. "(the file has 14 tensors, the model 15 by lwopt's names)" },
         { function(list) list[#list + 1] = { name = "extra.weight", count = 4,
              data = ffi.new("float[4]") } end,
           where .. "tensor 'extra.weight' is not in the model (the file has 16 tensors, the "
           .. "model 15 by lwopt's names)" },
         { function(list) list[4].shape = { 16, 48 } end, where .. "'h.0.attn.qkv.weight' has "
           .. "shape {16, 48} in the file but {48, 16} in the model" },
         { function(list) list[2].dtype = "I32" end, where .. "'wpe.weight' is I32; F32, BF16 "
           .. "and F16 tensors are read" },
      }
      for _, case in ipairs(cases) do
         write_params(path, ddp, case[1])
         assert.equal(case[2], error_of(function() load(path, model, ddp) end))
      end
      assert.equal("--init-from " .. dir .. "/none: no such file",
         error_of(function() load(dir .. "/none", model, ddp) end))
      local f = assert(io.open(path, "wb"))
      f:write("not a safetensors file")
      f:close()
      assert.matches(where:gsub("%p", "%%%0") .. "not a readable safetensors file %(header "
         .. "length %d+ exceeds the file %(22 bytes%) or the 100 MB limit%)$",
         error_of(function() load(path, model, ddp) end))
   end)

   it("reads an hf-gpt2 export back: weights transposed back, the padding rows zero", function()
      local model, source = setup()
      local ckpt = lw.checkpoint.save(dir .. "/ck", { ddp = source, step = 1,
         opt = lw.optim.new(source, { lr = 1e-2 }),
         extra = { n_layer = 2, n_embd = 16, n_head = 2, vocab = 20, seq = 8 } })
      export.run({ ckpt = ckpt, format = "hf-gpt2", out_dir = dir .. "/hf" })
      local _, ddp = setup({ scale = 0.5 })
      local line = load(dir .. "/hf/model.safetensors", model, ddp, 20)
      assert.equal("initialised from " .. dir .. "/hf/model.safetensors: 28 tensors by hf-gpt2's "
         .. "names (Conv1D weights transposed back), 13 zero biases dropped, F32; vocabulary rows "
         .. "20-31 (lwopt's padding) start at zero; the optimizer starts fresh", line)
      for _, s in ipairs(ddp.specs) do
         local want, got = source:param(s.name), ddp:param(s.name)
         for k = 0, got.numel - 1 do
            local padding = s.name == "wte.weight" and k >= 20 * 16
            assert.equal(padding and 0 or want.data[k], got.data[k], s.name)
         end
      end
      -- and nanoGPT's names, whose vocabulary keeps every row
      export.run({ ckpt = ckpt, format = "nanogpt", out_dir = dir .. "/ng" })
      _, ddp = setup({ scale = 0.5 })
      assert.matches("16 tensors by nanogpt's names, F32;", load(dir .. "/ng/model.safetensors",
         model, ddp, 20), 1, true)
      for _, s in ipairs(ddp.specs) do
         assert.same(source:param(s.name):totable(), ddp:param(s.name):totable(), s.name)
      end
   end)

   it("refuses Hugging Face biases that are not zero: this model has none", function()
      local model, with_bias = setup({ bias = true })
      local ckpt = lw.checkpoint.save(dir .. "/ck", { ddp = with_bias, step = 1,
         opt = lw.optim.new(with_bias, { lr = 1e-2 }),
         extra = { n_layer = 2, n_embd = 16, n_head = 2, vocab = 32, seq = 8 } })
      export.run({ ckpt = ckpt, format = "hf-gpt2", out_dir = dir .. "/hf" })
      local plain = lw.nn.GPT.new{ n_layer = 2, n_embd = 16, n_head = 2, vocab = 32, seq_len = 8 }
      local ddp = lw.ddp.new(plain:parameters(), lw.comm.self())
      local err = error_of(function() load(dir .. "/hf/model.safetensors", plain, ddp) end)
      assert.matches("^%-%-init%-from " .. dir:gsub("%p", "%%%0") .. "/hf/model%.safetensors: "
         .. "'transformer%.h%.0%.ln_1%.bias' is not zero %(largest |value| [%d.e-]+%), and this "
         .. "model has no biases: these weights need a model with biases$", err)
      assert.is_not_nil(model)
   end)

   it("refuses a file of 200,000 tensors in one line, in time linear in their number", function()
      -- a quadratic reader (each name looked up by a linear search) takes minutes here, a
      -- linear one about a second: 60 s tells them apart on any machine that runs the specs
      -- (-k 5: the recipe takes timeout's SIGTERM for a request to stop at a step's end)
      local file = helpers.many_tensors(dir .. "/many.safetensors", 200000)
      local out, status = helpers.sh("timeout -k 5 60 luajit recipes/gpt_small.lua --preset tiny "
         .. "--steps 1 --sample 0 --quiet --init-from " .. file)
      assert.equal(1, status, out)
      assert.matches("--init-from " .. file .. ": no tensor 'wte.weight' (26 more missing; the "
         .. "file has 200000 tensors, the model 27 by lwopt's names)\n", out, 1, true)
   end)

   it("is said by the recipe, and gives way to a checkpoint that --resume finds", function()
      local recipe = "luajit recipes/gpt_small.lua --preset tiny --sample 0 --quiet "
      local a = dir .. "/a.safetensors"
      local out, status = helpers.sh(recipe .. "--steps 1 --save-params " .. a)
      assert.equal(0, status, out)
      out, status = helpers.sh(recipe .. "--steps 1 --init-from " .. a .. " --ckpt-dir " .. dir
         .. "/ck --resume")
      assert.equal(0, status, out)
      assert.matches("nothing to resume: " .. dir .. "/ck did not exist (it was created for this "
         .. "run's checkpoints); starting at step 1\ninitialised from " .. a .. ": 27 tensors by "
         .. "lwopt's names, F32; the optimizer starts fresh\n", out, 1, true)
      out, status = helpers.sh(recipe .. "--steps 2 --init-from " .. a .. " --ckpt-dir " .. dir
         .. "/ck --resume")
      assert.equal(0, status, out)
      assert.matches("resumed from " .. dir .. "/ck/step-000000001: step 1, saved on 1 rank\n",
         out, 1, true)
      assert.matches("\n--init-from " .. a .. " not used: the run resumed from " .. dir
         .. "/ck/step-000000001, which continues it (--init-from starts a run; a resumed run takes its checkpoint's "
         .. "weights)\n", out, 1, true)
      -- a run's outputs never write over the weights it starts from
      out, status = helpers.sh(recipe .. "--steps 1 --init-from " .. a .. " --save-params " .. a)
      assert.equal(1, status, out)
      assert.matches("--save-params '" .. a .. "' is the same file as --init-from '" .. a .. "'",
         out, 1, true)
   end)
end)
