-- faults_spec.lua: the test-only faults (tests/lua/faults.lua, tests/lua/with_faults.lua) end a
-- job at the library's hook points as the environment asks, and the library itself reads no
-- test variable (the MPI kills and crashes are in tests/lua/ckpt_consistency.lua).
local lw = require("lwopt")
local helpers = require("helpers")

local faults = dofile("tests/lua/faults.lua")

local function env(vars) return function(name) return vars[name] end end

describe("tests/lua/faults.lua", function()
   local aborted
   local function abort(code) aborted[#aborted + 1] = code end
   before_each(function() aborted = {} end)
   after_each(function()
      lw.train.on_step_end = nil
      lw.checkpoint.on_point = nil
   end)

   it("installs nothing when neither variable is set", function()
      faults.from_env(env({}), abort)
      assert.is_nil(lw.train.on_step_end)
      assert.is_nil(lw.checkpoint.on_point)
   end)

   it("ends the job after step LWOPT_KILL_AFTER_STEP, with status 9", function()
      faults.from_env(env({ LWOPT_KILL_AFTER_STEP = "3" }), abort)
      lw.train.on_step_end(2, {})
      assert.same({}, aborted)
      lw.train.on_step_end(3, {})
      assert.same({ 9 }, aborted)
   end)

   it("ends the job at the checkpoint point LWOPT_CKPT_CRASH of a save", function()
      faults.from_env(env({ LWOPT_CKPT_CRASH = "manifest" }), abort)
      local reached = {}
      local model = lw.nn.GPT.new{ n_layer = 1, n_embd = 8, n_head = 2, vocab = 16, seq_len = 4 }
      local ddp = lw.ddp.new(model:parameters(), lw.comm.self())
      local opt = lw.optim.new(ddp, { lr = 1e-2 })
      local dir = helpers.fresh_path()
      -- the recording abort returns, so the save goes on to its end
      local stderr = io.stderr
      io.stderr = helpers.sink()
      local ok, err = pcall(lw.checkpoint.save, dir, { ddp = ddp, opt = opt, step = 1,
         on_point = function(point)
            reached[#reached + 1] = point .. (#aborted > 0 and " (after the abort)" or "")
         end })
      local said = io.stderr:text()
      io.stderr = stderr
      os.execute("rm -rf " .. dir)
      assert(ok, err)
      assert.same({ 9 }, aborted)
      assert.equal("checkpoint: crashing at 'manifest' (LWOPT_CKPT_CRASH)\n", said)
      assert.same({ "optim", "model", "manifest", "rename (after the abort)" }, reached)
   end)

   it("refuses a point that is not one, and a step that is not a number", function()
      assert.has_error(function() faults.from_env(env({ LWOPT_CKPT_CRASH = "manifset" })) end,
         "faults: LWOPT_CKPT_CRASH=manifset is not a checkpoint point (optim, model, manifest, "
         .. "rename)")
      assert.has_error(function() faults.from_env(env({ LWOPT_KILL_AFTER_STEP = "x" })) end,
         "faults: LWOPT_KILL_AFTER_STEP=x is not a step")
   end)
end)

describe("the fault variables", function()
   local dir
   local recipe = " recipes/gpt_small.lua --preset tiny --steps 2 --warmup 1 --batch 2 --sample 0 "
      .. "--quiet --ckpt-every 1 --ckpt-dir "
   local vars = "LWOPT_KILL_AFTER_STEP=1 LWOPT_CKPT_CRASH=rename "
   before_each(function() dir = helpers.fresh_path() end)
   after_each(function() os.execute("rm -rf " .. dir) end)

   it("are read by no file of the library", function()
      local out = helpers.sh("grep -rln 'LWOPT_KILL_AFTER_STEP\\|LWOPT_CKPT_CRASH' lua/")
      assert.equal("", out)
   end)

   it("change nothing in a recipe run by itself", function()
      local out, status = helpers.sh(vars .. "luajit" .. recipe .. dir)
      assert.equal(0, status, out)
      assert.equal(dir .. "/step-000000002", lw.checkpoint.latest(dir))
   end)

   it("end the recipe run through tests/lua/with_faults.lua where they say", function()
      local out, status = helpers.sh("LWOPT_KILL_AFTER_STEP=1 luajit tests/lua/with_faults.lua"
         .. recipe .. dir)
      assert.equal(9, status, out)
      assert.equal(dir .. "/step-000000001", lw.checkpoint.latest(dir))
      os.execute("rm -rf " .. dir)
      out, status = helpers.sh(vars .. "luajit tests/lua/with_faults.lua" .. recipe .. dir)
      assert.equal(9, status, out)
      assert.equal("checkpoint: crashing at 'rename' (LWOPT_CKPT_CRASH)\n", out)
      assert.is_nil(lw.checkpoint.latest(dir)) -- step-1 renamed, latest not yet written
      assert.is_not_nil(io.open(dir .. "/step-000000001/manifest.json"))
   end)
end)
