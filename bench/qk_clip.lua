-- bench/qk_clip.lua: QK-clip's effect on the largest attention logit over a run. The same
-- recipes/gpt_small.lua run (tiny preset, Muon, one rank, a learning rate high enough that the
-- attention logits grow) twice from the same seed, without and with --qk-clip TAU; prints each
-- run's largest logit over the layers (the log's max_logit, measured before the step's clip)
-- every EVERY steps, its peak and where, the heads clipped, and the final validation losses;
-- with --plot PNG also draws the two curves (`lwopt plot --y max-logit`).
-- Usage: bin/lwopt run bench/qk_clip.lua [--steps N] [--lr X] [--tau T] [--plot PNG]
--        (from the repo root; 500, 0.05, 10; under two minutes on the CPU)
local flags = require("lwopt.flags")
local logs = require("lwopt.logs")
local runs = dofile("bench/recipe_runs.lua")

local v = assert(flags.parse(arg, {
   { "steps", "int", 500, "steps each run" }, { "lr", "number", 0.05, "peak learning rate" },
   { "tau", "number", 10, "the --qk-clip logit" }, { "every", "int", 50, "steps a row" },
   { "plot", "string", nil, "draw the two curves into this PNG" },
}))

local common = ("--preset tiny --steps %d --lr %g --adamw-lr %g --eval-every 0 --eval-max 32")
   :format(v.steps, v.lr, v.lr)
local configs = {
   { name = "no clip", args = "" },
   { name = ("qk-clip %g"):format(v.tau), args = ("--qk-clip %g"):format(v.tau) },
}

-- a record's largest logit over its layers
local function top(rec)
   local m = -math.huge
   for _, x in ipairs(rec.max_logit or {}) do
      if type(x) == "number" then m = math.max(m, x) end
   end
   return m
end

local list = {}
for i, c in ipairs(configs) do
   local path = os.tmpname() .. ".jsonl"
   local cmd = runs.command({ ranks = 1, threads = 1, args = common .. " " .. c.args, log = path,
      quiet = true })
   os.execute(cmd) -- a failed run shows as missing step records
   local log = logs.read(path)
   log.name = c.name
   if #log.steps ~= v.steps then
      io.stderr:write(("%s: %d step records, %d expected: %s\n"):format(c.name, #log.steps,
         v.steps, cmd))
      os.exit(1)
   end
   list[i] = log
   c.path = path
end

print(("tiny preset, lr %g, %d steps, one rank: the largest attention logit over the layers, "
   .. "before the step's clip"):format(v.lr, v.steps))
print(("%6s  %12s  %12s"):format("step", configs[1].name, configs[2].name))
for s = v.every, v.steps, v.every do
   print(("%6d  %12.2f  %12.2f"):format(s, top(list[1].steps[s]), top(list[2].steps[s])))
end
for i, c in ipairs(configs) do
   local peak, at, clipped, val = -math.huge, 0, 0, nil
   for _, rec in ipairs(list[i].steps) do
      if top(rec) > peak then peak, at = top(rec), rec.step end
      clipped = clipped + (rec.qk_clipped or 0)
      val = rec.val_loss or val
   end
   print(("%s: peak %.2f at step %d, heads clipped %d over the run, final validation loss %.4f")
      :format(c.name, peak, at, clipped, val or 0 / 0))
end
if v.plot then
   local png, why = logs.plot(list, { out = v.plot, y = "max-logit" })
   print(png and ("chart: " .. png) or ("no chart: " .. tostring(why)))
end
for _, c in ipairs(configs) do
   os.remove(c.path)
   os.remove((c.path:gsub("%.jsonl$", ".png")))
end
