-- train_spec.lua: the schedule, a short training run through the library API on one rank, and
-- the step-end hook points.
local lw = require("lwopt")
local helpers = require("helpers")

describe("lw.train.schedule", function()
   it("warms up linearly, then follows a cosine down to the minimum", function()
      assert.equal(0.1, lw.train.schedule(1, 101, 10, 0.1))
      assert.equal(1, lw.train.schedule(10, 101, 10, 0.1))
      assert.equal(1, lw.train.schedule(11, 101, 10, 0.1))
      assert.near(0.55, lw.train.schedule(56, 101, 10, 0.1), 1e-12)
      assert.near(0.1, lw.train.schedule(101, 101, 10, 0.1), 1e-12)
      assert.equal(1, lw.train.schedule(1, 1, 0, 0.1))
   end)
end)

-- A tiny GPT on a repeated sentence, ready for lw.train.run: the run table (extra's fields
-- added) and a function that removes its files.
local function tiny_run(extra)
   local text = {}
   for i = 1, 400 do text[i] = "the cat sat on the mat. " end
   local path = helpers.tempfile(table.concat(text))
   local comm = lw.comm.init()
   local model = lw.nn.GPT.new{ n_layer = 1, n_embd = 32, n_head = 2, vocab = 256, seq_len = 16 }
   local ddp = lw.ddp.new(model:parameters(), comm)
   local opt = lw.optim.new(ddp, { lr = 1e-2 })
   for _, s in ipairs(model:parameters()) do
      ddp:param(s.name):copy(function(k) return s.role == "norm" and 1 or 0.02 * math.sin(k) end)
   end
   local run = { comm = comm, model = model, ddp = ddp, opt = opt,
      data = lw.data.load(path, { seq_len = 16 }), steps = 40, batch = 4, seq = 16, accum = 2,
      seed = 1, base_lr = 1e-2, lr_warmup = 5, eval_every = 20, eval_max = 8, quiet = true }
   for k, v in pairs(extra) do run[k] = v end
   model:bind(ddp, lw.train.hooks(run))
   return run, function() os.remove(path) end
end

describe("lw.train.run", function()
   it("lowers the loss of a tiny GPT and writes its configuration, then one JSON line per step",
      function()
      local log = os.tmpname()
      local run, cleanup = tiny_run{ log = log, log_config = { kind = "config", note = "tiny" } }
      local wall_clock = require("lwopt.C").lib.lw_wall_clock
      local before = wall_clock()
      local records = lw.train.run(run)
      assert.equal(40, #records)
      assert.is_true(records[40].loss < records[1].loss - 1.5)
      assert.is_number(records[20].val_loss)
      assert.is_nil(records[19].val_loss)
      -- tokens through each step (4 x 16 x 2 micro-steps a step), the wall clock at its end
      assert.same({ "step", 128, 40 * 128 }, { records[1].kind, records[1].tokens,
         records[40].tokens })
      local first, last = records[1].wall_time, records[40].wall_time
      assert.is_true(before <= first and first <= last and last <= wall_clock())
      local lines = 0
      for line in io.lines(log) do
         lines = lines + 1
         if lines == 1 then
            assert.equal('{"kind":"config","note":"tiny"}', line)
         else
            for _, key in ipairs({ '"kind":"step"', '"step":', '"loss":', '"lr":', '"grad_norm":',
               '"tokens_per_s":', '"time_ms":{"bwd":', '"comm_wait":', '"fwd":', '"opt":',
               '"tokens":', '"wall_time":' }) do
               assert.matches(key, line, 1, true)
            end
         end
      end
      assert.equal(41, lines)
      os.remove(log)
      cleanup()
   end)

   it("calls the step-end hooks after each step and its checkpoint, the run's first", function()
      local dir = helpers.fresh_path()
      local calls = {}
      local run, cleanup = tiny_run{ steps = 3, eval_every = 0,
         checkpoint = { dir = dir, every = 1, keep = 5, run_id = "hooks" } }
      run.on_step_end = function(step, r)
         assert.equal(run, r)
         assert.equal(("%s/step-%09d"):format(dir, step), lw.checkpoint.latest(dir))
         calls[#calls + 1] = "run " .. step
      end
      lw.train.on_step_end = function(step) calls[#calls + 1] = "train " .. step end
      local ok, err = pcall(lw.train.run, run)
      lw.train.on_step_end = nil
      os.execute("rm -rf " .. dir)
      cleanup()
      assert(ok, err)
      assert.same({ "run 1", "train 1", "run 2", "train 2", "run 3", "train 3" }, calls)
   end)
end)
