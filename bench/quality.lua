-- bench/quality.lua: Muon (layer-wise) against AdamW on recipes/gpt_small.lua (small preset,
-- dp 2), each with its learning rate tuned by a sweep (the best final validation loss of
-- `lrs`), same data, steps and schedule. Reports the step at which Muon first reaches AdamW's
-- final validation loss, as a fraction of the steps (goal: at most 0.8), and plots both
-- validation curves to bench/quality.png.
-- Usage: bin/lwopt run bench/quality.lua [steps] [eval_every] [muon lrs] [adamw lrs]
--        (from the repo root; lrs as comma lists, default 1e-3,3e-3,1e-2 each). The curves
--        behind the plot stay in bench/quality.dat.
local dkjson = require("dkjson")

local steps = tonumber(arg[1]) or 300
local every = tonumber(arg[2]) or 25
local function list(text)
   if text == nil then return { 1e-3, 3e-3, 1e-2 } end
   local out = {}
   for v in text:gmatch("[^,]+") do out[#out + 1] = assert(tonumber(v), "bad lr " .. v) end
   return out
end
local lrs = { muon = list(arg[3]), adamw = list(arg[4]) }

local function run(optimizer, lr)
   local log = ("/tmp/lwopt-quality-%s-%g.jsonl"):format(optimizer, lr)
   local cmd = ("mpirun -np 2 -x OPENBLAS_NUM_THREADS=1 luajit recipes/gpt_small.lua --steps %d "
      .. "--optimizer %s --lr %g --adamw-lr %g --warmup %d --eval-every %d --eval-max 128 "
      .. "--sample 0 --quiet --log %s > /dev/null"):format(steps, optimizer, lr, lr,
      math.floor(steps / 10), every, log)
   local ok = os.execute(cmd)
   assert(ok == 0 or ok == true, "failed: " .. cmd)
   local curve = {}
   for line in io.lines(log) do
      local r = dkjson.decode(line)
      if r.kind ~= "config" and r.val_loss then curve[#curve + 1] = { r.step, r.val_loss } end
   end
   os.remove(log)
   os.remove((log:gsub("%.jsonl$", ".png")))
   return curve
end

local best = {}
print("| optimizer | lr | final validation loss |")
print("|---|---|---|")
for _, optimizer in ipairs({ "muon", "adamw" }) do
   for _, lr in ipairs(lrs[optimizer]) do
      local curve = run(optimizer, lr)
      local final = curve[#curve][2]
      print(("| %s | %g | %.4f |"):format(optimizer, lr, final))
      if best[optimizer] == nil or final < best[optimizer].final then
         best[optimizer] = { lr = lr, final = final, curve = curve }
      end
   end
end

local target = best.adamw.final
local reached
for _, point in ipairs(best.muon.curve) do
   if point[2] <= target then
      reached = point[1]
      break
   end
end
print(("\nbest lr: muon %g (final %.4f), adamw %g (final %.4f)"):format(best.muon.lr,
   best.muon.final, best.adamw.lr, best.adamw.final))
if reached then
   print(("muon reaches adamw's final validation loss at step %d of %d: %.2f of the steps "
      .. "(goal <= 0.80; resolution %d steps)"):format(reached, steps, reached / steps, every))
else
   print("muon does not reach adamw's final validation loss")
end

local dat = "bench/quality.dat"
local f = assert(io.open(dat, "w"))
f:write("# step, validation loss of Muon (best lr), of AdamW (best lr)\n")
for i = 1, #best.muon.curve do
   f:write(("%d %.6f %.6f\n"):format(best.muon.curve[i][1], best.muon.curve[i][2],
      best.adamw.curve[i][2]))
end
f:close()
os.execute(("gnuplot -e \"set terminal pngcairo noenhanced size 800,480; "
   .. "set output 'bench/quality.png'; "
   .. "set xlabel 'step'; set ylabel 'validation loss (nats/byte)'; set grid; "
   .. "set title 'gpt_small, dp 2: Muon (lr %g) vs AdamW (lr %g)'; "
   .. "plot '%s' using 1:2 with linespoints pt 7 title 'Muon (layer-wise)', "
   .. "'' using 1:3 with linespoints pt 5 title 'AdamW'\""):format(best.muon.lr, best.adamw.lr, dat))
