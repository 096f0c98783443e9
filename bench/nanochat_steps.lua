-- nanochat_steps.lua: steps to plain Muon's final validation loss for the nanochat variant of
-- Muon. recipes/gpt_small.lua (small preset, CPU, one rank) runs once with plain Muon and once
-- with each variant, same seed, data and schedule, evaluating every --eval-every steps; for each
-- variant: its final validation loss and the first evaluated step at which it reaches plain
-- Muon's final one. Only steps are compared, not times (the machine is shared).
-- Usage: bin/lwopt run bench/nanochat_steps.lua [--steps N] [--eval-every K] [--threads T]
--        [--variants nanochat,normuon,...] (from the repo root; the preset's 500 steps by default)
local flags = require("lwopt.flags")
local runs = dofile("bench/recipe_runs.lua")

-- Each variant's recipe flags, beside plain Muon's (none).
local VARIANTS = {
   { "nanochat", "--muon-variant nanochat" },
   { "normuon", "--optimizer normuon --muon-variant nanochat" },
   -- the nanochat step at plain Muon's step size: the scale is moonlight's, the rest the variant's
   { "nanochat-moonlight", "--muon-variant nanochat --muon-scale moonlight" },
   { "normuon-moonlight", "--optimizer normuon --muon-variant nanochat --muon-scale moonlight" },
}
local NAMES = {}
for i, variant in ipairs(VARIANTS) do NAMES[i] = variant[1] end

local v = assert(flags.parse(arg, {
   { "steps", "int", 500, "optimizer steps of every run (the small preset's 500)", min = 1 },
   { "eval-every", "int", 25, "steps between validation evaluations", min = 1 },
   { "eval-max", "int", 128, "validation sequences per evaluation", min = 1 },
   { "threads", "int", 2, "BLAS threads of the one rank", min = 1 },
   { "variants", "string", "nanochat,normuon", "which variants run, a comma list of "
     .. table.concat(NAMES, ", ") },
}))

local chosen = {}
for name in v.variants:gmatch("[^,]+") do
   local found
   for _, variant in ipairs(VARIANTS) do
      if variant[1] == name then found = variant end
   end
   if found == nil then
      io.stderr:write(("unknown variant '%s' (%s)\n"):format(name, table.concat(NAMES, ", ")))
      os.exit(2)
   end
   chosen[#chosen + 1] = found
end

-- The validation curve of one run: { { step, val_loss }, ... }.
local function curve(args)
   local flags_text = ("--preset small --steps %d --eval-every %d --eval-max %d%s"):format(
      v.steps, v.eval_every, v.eval_max, args == "" and "" or " " .. args)
   local records, cmd = runs.run({ ranks = 1, threads = v.threads, args = flags_text,
      any_status = true })
   local out = {}
   for _, rec in ipairs(records) do
      if rec.val_loss then out[#out + 1] = { rec.step, rec.val_loss } end
   end
   assert(#out > 0 and out[#out][1] == v.steps, "no final validation loss from: " .. cmd)
   io.stderr:write(("done: %s (final %.4f)\n"):format(cmd, out[#out][2]))
   return out
end

local plain = curve("")
local target = plain[#plain][2]
local results = {}
for i, variant in ipairs(chosen) do
   local c = curve(variant[2])
   local reached
   for _, point in ipairs(c) do
      if point[2] <= target then
         reached = point[1]
         break
      end
   end
   results[i] = { curve = c, reached = reached }
   io.stderr:write(("%s: plain Muon's final %.4f %s\n"):format(variant[1], target,
      reached and "first reached at step " .. reached or "not reached"))
end

print(("recipes/gpt_small.lua --preset small, one rank, %d steps, validation every %d steps "
   .. "(%d sequences); plain Muon's final validation loss %.4f"):format(v.steps, v.eval_every,
   v.eval_max, target))
print("")
print("| run | flags | final validation loss | first step at plain Muon's final | of the steps |")
print("|---|---|---|---|---|")
print(("| plain Muon | (none) | %.4f | %d | 1.00 |"):format(target, v.steps))
for i, variant in ipairs(chosen) do
   local r = results[i]
   print(("| %s | `%s` | %.4f | %s | %s |"):format(variant[1], variant[2],
      r.curve[#r.curve][2], r.reached and tostring(r.reached) or "not reached",
      r.reached and ("%.2f"):format(r.reached / v.steps) or "-"))
end
print("")
local head = { "| step | plain Muon" }
for _, variant in ipairs(chosen) do head[#head + 1] = variant[1] end
print(table.concat(head, " | ") .. " |")
print(("|---"):rep(#chosen + 2) .. "|")
for k, point in ipairs(plain) do
   local row = { ("| %d | %.4f"):format(point[1], point[2]) }
   for i in ipairs(chosen) do
      local p = results[i].curve[k]
      row[#row + 1] = p and ("%.4f"):format(p[2]) or ""
   end
   print(table.concat(row, " | ") .. " |")
end
