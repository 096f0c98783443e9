-- faults.lua: test-only fault injection. Ends the job at a hook point of the library as a kill
-- would: MPI_Abort with status 9, not os.exit, whose MPI_Finalize would leave the other ranks
-- waiting in their next collective. The library only offers the hook points
-- (lw.train.on_step_end, lw.checkpoint.on_point) and reads no test variable itself.
-- Load with dofile("tests/lua/faults.lua"); tests/lua/with_faults.lua runs a recipe with the
-- faults the environment asks for.
local train = require("lwopt.train")
local checkpoint = require("lwopt.checkpoint")

local faults = {}

local function abort_job() require("lwopt.comm").init():abort(9) end

-- The job ends after step n (on every rank, after that step's checkpoint). abort: how (the
-- default ends the job; a spec passes its own).
function faults.kill_after_step(n, abort)
   abort = abort or abort_job
   train.on_step_end = function(step)
      if step == n then abort(9) end
   end
end

-- The job ends at a checkpoint point ("optim", "model", "manifest" or "rename": see
-- lw.checkpoint.on_point) of the first save that reaches it.
function faults.crash_at(point, abort)
   abort = abort or abort_job
   local known = false
   for _, p in ipairs(checkpoint.POINTS) do known = known or p == point end
   if not known then
      error(("faults: LWOPT_CKPT_CRASH=%s is not a checkpoint point (%s)"):format(point,
         table.concat(checkpoint.POINTS, ", ")), 0)
   end
   checkpoint.on_point = function(reached)
      if reached == point then
         io.stderr:write("checkpoint: crashing at '", point, "' (LWOPT_CKPT_CRASH)\n")
         abort(9)
      end
   end
end

-- Installs what the environment asks for: LWOPT_KILL_AFTER_STEP=N (kill_after_step) and
-- LWOPT_CKPT_CRASH=<point> (crash_at). getenv: os.getenv unless given.
function faults.from_env(getenv, abort)
   getenv = getenv or os.getenv
   local step = getenv("LWOPT_KILL_AFTER_STEP")
   if step then
      local n = tonumber(step)
      if n == nil then error("faults: LWOPT_KILL_AFTER_STEP=" .. step .. " is not a step", 0) end
      faults.kill_after_step(n, abort)
   end
   local point = getenv("LWOPT_CKPT_CRASH")
   if point then faults.crash_at(point, abort) end
end

return faults
