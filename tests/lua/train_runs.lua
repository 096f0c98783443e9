-- train_runs.lua: runs of tests/lua/train_run.lua (the tiny GPT trained through the library
-- API) for the consistency drivers (train_consistency.lua, dtype_consistency.lua), and how two
-- runs differ. Load with dofile("tests/lua/train_runs.lua").
local ffi = require("ffi")

local runs = {}

local tmp = os.tmpname()
os.remove(tmp)

-- Runs train_run.lua on np ranks with args; { losses (per step, then the validation loss),
-- params (rank 0's final parameters, raw f32 bytes), memory (its .memory figures) }. An error
-- when the run fails.
function runs.run(name, np, args)
   local out = tmp .. "-" .. name
   local launcher = np > 1 and ("mpirun --oversubscribe -np " .. np .. " -x OPENBLAS_NUM_THREADS=1 ")
      or ""
   local cmd = launcher .. "bin/lwopt run tests/lua/train_run.lua --out " .. out .. " " .. args
   local ok = os.execute(cmd)
   if ok ~= 0 and ok ~= true then error("failed: " .. cmd) end
   local losses = {}
   for line in io.lines(out .. ".losses") do losses[#losses + 1] = tonumber(line) end
   local f = assert(io.open(out .. ".params", "rb"))
   local params = f:read("*a")
   f:close()
   local memory = {}
   for line in io.lines(out .. ".memory") do
      local k, n = line:match("^(%a+) (%d+)$")
      memory[k] = tonumber(n)
   end
   for _, ext in ipairs({ ".losses", ".params", ".memory" }) do os.remove(out .. ext) end
   return { losses = losses, params = params, memory = memory }
end

-- The largest difference between two runs' losses.
function runs.max_loss_diff(a, b)
   local m = 0
   for i = 1, #a.losses do m = math.max(m, math.abs(a.losses[i] - b.losses[i])) end
   return m
end

-- The largest difference between two runs' final parameters.
function runs.max_param_diff(a, b)
   local n = #a.params / 4
   local x = ffi.cast("const float *", a.params)
   local y = ffi.cast("const float *", b.params)
   local m = 0
   for i = 0, n - 1 do m = math.max(m, math.abs(x[i] - y[i])) end
   return m
end

return runs
