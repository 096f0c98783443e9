-- bench/bf16_band.lua: how far a bf16 run's loss curve lies from the fp32 run's over a long run.
-- The same recipes/gpt_small.lua run (small preset, Muon, one rank) twice from the same seed:
-- all fp32 (parameters, activations, matrix products), and all bf16 the recipe allows on the
-- device (bf16 parameters with fp32 master weights and bf16 activations everywhere; bf16 matrix
-- products on a GPU, fp32 ones on the CPU, which computes fp32 whatever is asked). Prints the
-- largest step-to-step difference, the largest difference of the 20-step means (the curve as
-- one reads it, the noise of single batches averaged), the last mean's and the final validation
-- loss's, and whether the smoothed curves stay within BAND of each other.
-- Usage: bin/lwopt run bench/bf16_band.lua [--device cpu|cuda] [--steps N] [--preset NAME]
--        (from the repo root; cpu, 200, small)
local flags = require("lwopt.flags")
local runs = dofile("bench/recipe_runs.lua")

local v = assert(flags.parse(arg, {
   { "device", "string", "cpu", "cpu or cuda" }, { "steps", "int", 200, "steps each run" },
   { "preset", "string", "small", "the recipe's preset" },
}))

-- The band the smoothed curves must keep: bf16's rounding of parameters (2^-9 relative) and
-- activations moves single losses by a few 1e-3 and does not compound over a run that trains
-- normally (the master weights keep every update in fp32); 0.02 nats still fails a run that
-- drifts away or a broken bf16 path, which moves the loss by far more.
local BAND = 0.02
local WINDOW = 20

local common = ("--preset %s --steps %d --eval-every 0 --eval-max 8 --device %s"):format(v.preset,
   v.steps, v.device)
local gpu = v.device ~= "cpu"
local configs = {
   { name = "fp32", args = "--param-dtype fp32 --activations fp32 --matmul fp32" },
   { name = "bf16", args = "--param-dtype bf16 --activations bf16 --matmul "
      .. (gpu and "bf16" or "fp32") },
}

-- step losses, and the final validation loss (the last step record's val_loss)
local function losses(records)
   local out, val = {}, nil
   for _, rec in ipairs(records) do
      if rec.kind == "step" then
         out[#out + 1] = rec.loss
         val = rec.val_loss or val
      end
   end
   return out, val
end

local result = {}
for _, c in ipairs(configs) do
   -- the exit status is not asked: at the end the recipe draws the loss curve with gnuplot,
   -- which a GPU machine may lack (exit 1 after the training); the records say whether every
   -- step ran
   local records, cmd = runs.run({ ranks = 1, threads = 2, args = common .. " " .. c.args,
      quiet = true, any_status = true })
   local l, val = losses(records)
   if #l ~= v.steps then
      io.stderr:write(("%s: %d step records, %d expected: %s\n"):format(c.name, #l, v.steps, cmd))
      os.exit(1)
   end
   result[c.name] = { losses = l, val = val }
end

local a, b = result.fp32.losses, result.bf16.losses
local worst_step, worst_mean, last_mean = 0, 0, 0
for i = 1, v.steps do
   worst_step = math.max(worst_step, math.abs(b[i] - a[i]))
   if i >= WINDOW then
      local sa, sb = 0, 0
      for j = i - WINDOW + 1, i do sa, sb = sa + a[j], sb + b[j] end
      last_mean = (sb - sa) / WINDOW
      worst_mean = math.max(worst_mean, math.abs(last_mean))
   end
end
print(("%s, %s preset, %d steps: fp32 %.4f -> %.4f, bf16 %.4f -> %.4f"):format(v.device,
   v.preset, v.steps, a[1], a[#a], b[1], b[#b]))
print(("bf16 - fp32: largest step %.4f, largest %d-step mean %.4f, last %d-step mean %+.4f, "
   .. "final validation %+.4f (%.4f against %.4f)"):format(worst_step, WINDOW, worst_mean, WINDOW,
   last_mean, (result.bf16.val or 0 / 0) - (result.fp32.val or 0 / 0), result.bf16.val or 0 / 0,
   result.fp32.val or 0 / 0))
print(("band %.2f on the %d-step means: %s"):format(BAND, WINDOW,
   worst_mean <= BAND and "within" or "OUTSIDE"))
os.exit(worst_mean <= BAND and 0 or 1)
