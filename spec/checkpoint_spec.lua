-- checkpoint_spec.lua: checkpoints on one rank: the directory format, keep-K pruning,
-- weights-only loading, an independent reader of model.safetensors, and a clear error for
-- every corruption (the MPI round trips and resharding are in tests/lua/ckpt_consistency.lua).
local ffi = require("ffi")
local lw = require("lwopt")
local helpers = require("helpers")

local function setup()
   local model = lw.nn.GPT.new{ n_layer = 1, n_embd = 16, n_head = 2, vocab = 32, seq_len = 8 }
   local ddp = lw.ddp.new(model:parameters(), lw.comm.self())
   local opt = lw.optim.new(ddp, { lr = 1e-2 })
   for i, s in ipairs(model:parameters()) do
      ddp:param(s.name):copy(function(k) return s.role == "norm" and 1 or 0.1 * math.sin(i + k) end)
   end
   model:bind(ddp, nil)
   return model, ddp, opt
end

local function step(model, ddp, opt)
   local tokens, targets = ffi.new("int32_t[16]"), ffi.new("int32_t[16]")
   for i = 0, 15 do tokens[i], targets[i] = (i * 5) % 32, (i * 7 + 1) % 32 end
   ddp:zero_grad()
   model:forward(tokens, targets, 2, 8)
   model:backward(1)
   return opt:step()
end

local function snapshot(ddp)
   local out = {}
   for _, s in ipairs(ddp.specs) do out[s.name] = ddp:param(s.name):totable() end
   return out
end

describe("lw.checkpoint", function()
   local dir
   before_each(function()
      dir = os.tmpname()
      os.remove(dir)
   end)
   after_each(function() os.execute("rm -rf " .. dir) end)

   it("saves a directory of model, optimizer state and manifest, and resumes exactly", function()
      local model, ddp, opt = setup()
      step(model, ddp, opt)
      local path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1, extra = { seed = 5 } })
      assert.equal(dir .. "/step-000000001", path)
      assert.equal(path, lw.checkpoint.latest(dir))
      for _, f in ipairs({ "model.safetensors", "optim-r00000.safetensors", "manifest.json" }) do
         assert.is_not_nil(io.open(path .. "/" .. f), f)
      end
      step(model, ddp, opt)
      local expect = snapshot(ddp)
      -- a second run from the checkpoint takes the same step
      local model2, ddp2, opt2 = setup()
      local m = lw.checkpoint.load(path, { ddp = ddp2, opt = opt2 })
      assert.equal(1, m.step)
      assert.equal(5, m.extra.seed)
      step(model2, ddp2, opt2)
      assert.same(expect, snapshot(ddp2))
   end)

   it("keeps the newest K checkpoints", function()
      local model, ddp, opt = setup()
      for s = 1, 4 do
         step(model, ddp, opt)
         lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = s, keep = 2 })
      end
      local out = helpers.sh("ls " .. dir)
      assert.equal("latest\nstep-000000003\nstep-000000004\n", out)
   end)

   it("loads weights only, with a fresh optimizer", function()
      local model, ddp, opt = setup()
      step(model, ddp, opt)
      local path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1 })
      local _, ddp2 = setup()
      lw.checkpoint.load(path, { ddp = ddp2, weights_only = true })
      assert.same(snapshot(ddp), snapshot(ddp2))
   end)

   it("writes model.safetensors that an independent reader (python3 + numpy) loads", function()
      local model, ddp, opt = setup()
      step(model, ddp, opt)
      local path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1 })
      local expect = ddp:param("h.0.mlp.fc.weight"):totable()
      local t = helpers.read_safetensors(path .. "/model.safetensors", "h.0.mlp.fc.weight")
      assert.same({ 64, 16 }, t.shape)
      assert.equal(expect[1], t.first)
      assert.equal(expect[#expect], t.last)
   end)

   describe("refuses a damaged or foreign checkpoint, naming the file", function()
      local path, ddp2, opt2
      before_each(function()
         local model, ddp, opt = setup()
         step(model, ddp, opt)
         path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1 })
         local _
         _, ddp2, opt2 = setup()
      end)

      local function fails(message)
         local before = snapshot(ddp2)
         local ok, err = pcall(lw.checkpoint.load, path, { ddp = ddp2, opt = opt2 })
         assert.is_false(ok)
         assert.matches(message, err, 1, true)
         assert.same(before, snapshot(ddp2)) -- nothing was overwritten
      end

      it("a missing file", function()
         os.remove(path .. "/optim-r00000.safetensors")
         fails("optim-r00000.safetensors: missing or unreadable")
      end)

      it("a truncated file", function()
         helpers.sh("truncate -s -10 " .. path .. "/model.safetensors")
         fails("model.safetensors has ")
         fails("(truncated?)")
      end)

      it("a flipped bit", function()
         local f = assert(io.open(path .. "/model.safetensors", "r+b"))
         f:seek("set", 500)
         local byte = f:read(1):byte()
         f:seek("set", 500)
         f:write(string.char(bit.bxor(byte, 4)))
         f:close()
         fails("model.safetensors fails its checksum")
      end)

      it("another model", function()
         local other = lw.nn.GPT.new{ n_layer = 1, n_embd = 16, n_head = 2, vocab = 48, seq_len = 8 }
         ddp2 = lw.ddp.new(other:parameters(), lw.comm.self())
         opt2 = lw.optim.new(ddp2, {})
         fails("'wte.weight' has shape {32, 16} in " .. path .. " but {48, 16} in the model")
      end)

      it("an unknown format version", function()
         local f = assert(io.open(path .. "/manifest.json"))
         local text = f:read("*a"):gsub('"version": 1', '"version": 7')
         f:close()
         f = assert(io.open(path .. "/manifest.json", "w"))
         f:write(text)
         f:close()
         fails("has format version 7; this lwopt reads version 1")
      end)

      it("a directory that is not a checkpoint, or a broken manifest", function()
         path = dir
         fails("is not a checkpoint (no manifest.json)")
         path = dir .. "/step-000000001"
         local f = assert(io.open(path .. "/manifest.json", "w"))
         f:write('{"format": "lwopt-checkpoint", ')
         f:close()
         fails("manifest.json: json.decode: json:")
      end)
   end)
end)
