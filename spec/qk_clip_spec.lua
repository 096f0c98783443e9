-- qk_clip_spec.lua: lwopt.qk_clip over a small GPT with QKV biases on one rank: the step's
-- largest logits as the model measures them, and QK-clip through the optimizer, checked on the
-- first layer (whose input no clip changes) at lr 0, where the update leaves the weights alone;
-- then the recipe's --qk-clip and its log's fields, the logits of a step reduced over the ranks
-- (mpirun) as over micro-steps, and the same logs under tensor and expert parallelism.
local ffi = require("ffi")
local lw = require("lwopt")
local qk_clip = require("lwopt.qk_clip")
local helpers = require("helpers")

local root = assert(io.popen("pwd")):read("*l")
local recipe = root .. "/recipes/gpt_small.lua"
local MPIRUN = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun -np 2 "
   .. "-x OPENBLAS_NUM_THREADS=1 "

local B, T, C, NH, HOT = 2, 16, 32, 4, 1
local HD = C / NH

-- The model, its buffers and an optimizer at lr 0, head HOT's Q and K rows of layer h.0 four
-- times the others, and a batch.
local function setup()
   local comm = lw.comm.init()
   local model = lw.nn.GPT.new{ n_layer = 2, n_embd = C, n_head = NH, vocab = 256, seq_len = T,
      bias = true }
   local ddp = lw.ddp.new(model:parameters(), comm)
   local opt = lw.optim.new(ddp, { lr = 0 })
   for _, s in ipairs(model:parameters()) do
      ddp:param(s.name):copy(function(k)
         local row = math.floor((k - 1) / C)
         local hot = s.name == "h.0.attn.qkv.weight"
            and (math.floor(row / HD) == HOT or math.floor(row / HD) == NH + HOT)
         return s.role == "norm" and 1 or (hot and 4 or 1) * 0.3 * math.sin(0.7 * k)
      end)
   end
   model:bind(ddp, ddp:hooks())
   local tokens, targets = ffi.new("int32_t[?]", B * T), ffi.new("int32_t[?]", B * T)
   for i = 0, B * T - 1 do tokens[i], targets[i] = (i * 37) % 256, (i * 37 + 1) % 256 end
   return { comm = comm, model = model, ddp = ddp, opt = opt, tokens = tokens,
            targets = targets }
end

-- Layer l's heads' largest logits of the last forward, as a list.
local function layer(model, l)
   local m, nh = model:max_logits()
   local out = {}
   for h = 1, nh do out[h] = m[(l - 1) * nh + h - 1] end
   return out
end

describe("lwopt.qk_clip", function()
   it("clips the heads above tau to tau and leaves the others as they were", function()
      local r = setup()
      local tracker = qk_clip.new(r.model, nil)
      tracker:start()
      r.model:forward(r.tokens, r.targets, B, T)
      tracker:add()
      local before = layer(r.model, 1)
      local others = 0
      for h = 1, NH do if h ~= HOT + 1 then others = math.max(others, before[h]) end end
      assert.is_true(before[HOT + 1] > 2 * others) -- the case is what it says
      -- measure only: the layers' largest, nothing clipped
      local seen = tracker:finish(r.opt, r.comm)
      assert.equal(2, #seen.layers)
      assert.equal(before[HOT + 1], seen.layers[1])
      assert.is_nil(seen.clipped)
      -- now with tau between the hot head and the rest
      local tau = (before[HOT + 1] + others) / 2
      tracker = qk_clip.new(r.model, tau)
      tracker:start()
      r.model:forward(r.tokens, r.targets, B, T)
      tracker:add()
      r.ddp:zero_grad()
      r.model:backward(1)
      local res = tracker:finish(r.opt, r.comm)
      assert.is_true(res.clipped >= 1)
      r.opt:step()
      r.ddp:finish_param_sync()
      r.model:forward(r.tokens, r.targets, B, T)
      local after = layer(r.model, 1)
      assert.near(tau, after[HOT + 1], 1e-5 * tau)
      for h = 1, NH do if h ~= HOT + 1 then assert.equal(before[h], after[h]) end end
   end)

   it("refuses a tau that is not a finite number above 0", function()
      local model = lw.nn.GPT.new{ n_layer = 1, n_embd = C, n_head = NH, vocab = 256, seq_len = T }
      for _, tau in ipairs({ 0, -1, math.huge, "1" }) do
         assert.has_error(function() qk_clip.new(model, tau) end)
      end
   end)

   -- the recipe's step records of a tiny run with args (and --log), through launcher
   local function records(args, launcher)
      local log = os.tmpname() .. ".jsonl"
      local out, status = helpers.sh("cd /tmp && " .. (launcher or "") .. "luajit " .. recipe
         .. " --preset tiny --sample 0 --quiet --eval-max 1 --log " .. log .. " " .. args)
      assert.equal(0, status, out)
      local steps, configs = helpers.log_records(log)
      os.remove(log)
      os.remove((log:gsub("%.jsonl$", ".png")))
      return steps, configs[1]
   end

   it("runs the recipe with --qk-clip and logs each layer's largest logit and the heads clipped",
      function()
      local clipped, config = records("--steps 4 --qk-clip 0.1")
      assert.equal(0.1, config.flags["qk-clip"])
      local plain = records("--steps 4")
      for i, rec in ipairs(clipped) do
         assert.equal(4, #rec.max_logit) -- the tiny preset's layers
         for _, x in ipairs(rec.max_logit) do assert.is_true(x > 0 and x < 1, tostring(x)) end
         assert.is_nil(plain[i].qk_clipped)
      end
      -- the initial logits (about 0.11) pass 0.1: heads clipped from the first step on; before
      -- its update the two runs' weights were the same, and so are their logits
      assert.is_true(clipped[1].qk_clipped > 0)
      assert.same(plain[1].max_logit, clipped[1].max_logit)
      assert.are_not.same(plain[3].max_logit, clipped[3].max_logit)
   end)

   it("reduces a step's logits over the ranks as over its micro-steps #mpi", function()
      local args = "--steps 2 --batch 4 --qk-clip 0.1"
      local one = records(args .. " --accum 2")
      local two = records(args, MPIRUN)
      -- the same 8 sequences a step, split over micro-steps or over ranks: the first step's
      -- weights are the same, so are its logits up to the products' summation order, which the
      -- BLAS's thread count sets (one rank may use more threads than each of two)
      for l = 1, 4 do assert.near(one[1].max_logit[l], two[1].max_logit[l], 1e-6) end
      assert.equal(one[1].qk_clipped, two[1].qk_clipped)
      for l = 1, 4 do assert.near(one[2].max_logit[l], two[2].max_logit[l], 1e-4) end
   end)

   -- records a and b agree on every step's logits (within tol) and heads clipped
   local function agree(a, b, tol)
      assert.equal(#a, #b)
      for i = 1, #a do
         for l = 1, #a[i].max_logit do
            assert.near(a[i].max_logit[l], b[i].max_logit[l], tol)
         end
         assert.equal(a[i].qk_clipped, b[i].qk_clipped)
      end
   end

   it("clips each TP rank's own heads: --tp 2 logs and clips as --tp 1 #mpi", function()
      local args = "--steps 3 --qk-clip 0.1"
      agree(records(args), records(args .. " --tp 2", MPIRUN), 1e-5)
   end)

   it("reduces over every rank of an expert-parallel model: --ep 2 as --ep 1 #mpi", function()
      local args = "--preset moe --steps 2 --qk-clip 0.1"
      agree(records(args, MPIRUN), records(args .. " --ep 2", MPIRUN), 1e-5)
   end)
end)
