-- comm_spec.lua: the communicator from Lua on one rank (the MPI runs are in tests/lua/).
local lw = require("lwopt")
local helpers = require("helpers")

describe("lw.comm", function()
   it("gives a one-rank world outside mpirun, the same object each time", function()
      local c = lw.comm.init()
      assert.equal(0, c.rank)
      assert.equal(1, c.size)
      assert.equal("self", c.backend)
      assert.equal(c, lw.comm.init())
   end)

   it("reduces lists and broadcasts strings", function()
      local c = lw.comm.self()
      assert.same({ 1.5, -2 }, c:allreduce({ 1.5, -2 }))
      assert.same({ 7 }, c:allreduce({ 7 }, "max", "i64"))
      assert.equal("hello", c:broadcast_string("hello"))
      assert.has_error(function() c:allreduce({ 1 }, "avg") end, "comm:allreduce: unknown op 'avg'")
      local half = c:split(0)
      assert.equal(1, half.size)
   end)

   it("exchanges lists with every rank, learning the counts first", function()
      local c = lw.comm.self()
      c:reset_counters()
      assert.same({ { 1, -2, 3 } }, c:alltoallv({ { 1, -2, 3 } }))
      assert.same({ {} }, c:alltoallv({ {} }))
      assert.same({ { 1.5, 0.25 } }, c:alltoallv({ { 1.5, 0.25 } }, "f32"))
      assert.equal(6, c:counters().alltoall.calls) -- the counts', then the values'
      assert.equal(0, c:counters().alltoall.bytes) -- nothing leaves the one rank
      assert.has_error(function() c:alltoallv({ { 1 }, { 2 } }) end,
         "comm:alltoallv: parts must be a list of 1 lists (one per rank), got 2 lists")
      assert.has_error(function() c:alltoallv({ 7 }) end,
         "comm:alltoallv: parts[1] (for rank 0) must be a list, got number")
      assert.has_error(function() c:alltoallv({ { 1, 2.5 } }) end,
         "comm:alltoallv: parts[1][2] is 2.5, not an integer within 2^53 (dtype i64)")
      assert.has_error(function() c:alltoallv({ { 1 } }, "f64") end,
         "comm:alltoallv: unknown dtype 'f64' (i64 or f32)")
      assert.equal(6, c:counters().alltoall.calls) -- refused before any collective
   end)

   it("knows its local rank: 0 outside a launcher", function()
      if lw.comm.launched() ~= 0 or select(2, lw.comm.launched()) ~= 1 then
         return pending("started by a launcher")
      end
      assert.equal(0, lw.comm.local_rank())
   end)

   it("counts calls per operation", function()
      local c = lw.comm.self()
      c:reset_counters()
      c:allreduce({ 1, 2 })
      c:barrier()
      local n = c:counters()
      assert.equal(1, n.allreduce.calls)
      assert.equal(1, n.barrier.calls)
      assert.equal(0, n.reduce_scatter.calls)
   end)

   it("sets the watchdog's timeout, which splits inherit, and its phase and labels", function()
      local c = lw.comm.self()
      assert.equal(tonumber(os.getenv("LWOPT_TIMEOUT") or "600"), c:timeout())
      c:set_timeout(2.5)
      assert.equal(2.5, c:timeout())
      assert.equal(2.5, c:split(0):timeout())
      c:set_timeout(0)
      assert.equal(0, c:timeout())
      assert.has_error(function() c:set_timeout(-1) end,
         "comm:set_timeout: comm: timeout must be a finite number of seconds >= 0 (0 turns the "
         .. "watchdog off), got -1")
      assert.has_error(function() c:set_timeout("30") end,
         "comm:set_timeout: seconds must be a number, got string")
      c:set_phase("step 12")
      c:set_phase(nil)
      c:set_label("the validation loss")
      assert.same({ 3 }, c:allreduce({ 3 })) -- one rank: nothing to wait for, whatever the timeout
      assert.has_error(function() c:set_phase(12) end,
         "comm:set_phase: text must be a string or nil, got number")
   end)

   it("ends the process with the message and its traceback when run's function fails", function()
      local out, status = helpers.sh("bin/lwopt run spec/fixtures/fails.lua")
      assert.equal(1, status)
      assert.matches("^spec/fixtures/fails.lua:5: broken on purpose\nstack traceback:\n", out)
   end)

   it("prints a message for the user as one line, with its traceback only when asked", function()
      local out, status = helpers.sh("bin/lwopt run spec/fixtures/user_error.lua")
      assert.equal(1, status)
      assert.equal("--thing must be sensible, got 'nonsense'\n", out)
      out, status = helpers.sh("LWOPT_TRACEBACK=1 bin/lwopt run spec/fixtures/user_error.lua")
      assert.equal(1, status)
      assert.matches("^%-%-thing must be sensible, got 'nonsense'\nstack traceback:\n", out)
   end)

   describe("under mpirun #mpi", function()
      local mpirun = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 "
         .. "mpirun -np 2 -x OPENBLAS_NUM_THREADS=1 "
      local function count(text, pattern)
         local n = 0
         for _ in text:gmatch(pattern) do n = n + 1 end
         return n
      end

      it("exchanges lists between every pair of ranks", function()
         local out, status = helpers.sh(mpirun:gsub("%-np 2", "--oversubscribe -np 3")
            .. "bin/lwopt run spec/fixtures/alltoallv.lua")
         assert.equal(0, status)
         for r = 0, 2 do
            assert.matches(("rank %d of 3: alltoallv right, 4 calls\n"):format(r), out, 1, true)
         end
      end)

      it("prints an error every rank makes once, from rank 0, in one line", function()
         local out, status = helpers.sh(mpirun .. "bin/lwopt run spec/fixtures/user_error.lua")
         assert.equal(1, status)
         assert.equal(1, count(out, "must be sensible"))
         assert.matches("[rank 0] --thing must be sensible, got 'nonsense'\n", out, 1, true)
         assert.is_nil(out:find("traceback", 1, true))
         out, status = helpers.sh(mpirun .. "luajit recipes/gpt_small.lua --data /nonexistent")
         assert.equal(1, status)
         assert.equal(1, count(out, "cannot read"))
         out, status = helpers.sh(mpirun .. "luajit recipes/gpt_small.lua --step 5")
         assert.equal(2, status)
         assert.equal(1, count(out, "unknown flag"))
         assert.is_nil(out:find("usage:", 1, true))
      end)

      it("prints an error on one rank with that rank's number, and its traceback", function()
         local out, status = helpers.sh(mpirun .. "bin/lwopt run spec/fixtures/fails.lua")
         assert.equal(1, status)
         assert.equal(1, count(out, "broken on purpose\n"))
         assert.matches("[rank 1] spec/fixtures/fails.lua:5: broken on purpose\nstack traceback:",
            out, 1, true)
      end)

      it("agrees on a check that failed on one rank: its message, once, naming it", function()
         local out, status = helpers.sh(mpirun .. "bin/lwopt run spec/fixtures/agree.lua")
         assert.equal(1, status)
         assert.equal(1, count(out, "no space left"))
         assert.matches("[rank 1] checkpoint: no space left on the disk of rank 1\n", out, 1, true)
         assert.is_nil(out:find("went on", 1, true))
      end)

      it("reports a check that failed on one rank alike on every rank, naming the rank", function()
         local out, status = helpers.sh(mpirun .. "luajit recipes/gpt_small.lua --preset tiny "
            .. "--steps 2 --quiet --ckpt-dir /proc/self/cannot")
         assert.equal(1, status)
         assert.equal(1, count(out, "cannot be created"))
         assert.matches("[rank 0] --ckpt-dir '/proc/self/cannot' cannot be created", out, 1, true)
         assert.is_nil(out:find("other rank", 1, true))
         assert.is_nil(out:find("step ", 1, true))
      end)
   end)
end)
