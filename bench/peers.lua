-- bench/peers.lua: recipes/gpt_small.lua (small preset) against its PyTorch CPU peer,
-- bench/peers/torch_cpu.py (the same model, bytes, batches, schedule, AdamW and Muon, written
-- from lwopt's sources; Debian's python3-torch), on this machine, in one run:
--   AdamW and Muon in 1 process x 2 threads (lwopt: OPENBLAS_NUM_THREADS=2; torch: 2 intra-op
--   threads and 2 OpenBLAS threads); AdamW and Muon on 2 ranks x 1 thread (lwopt: mpirun -np 2,
--   layer-wise; torch: DDP over gloo, Muon on every rank in full, or split across the ranks
--   with an all_gather of the updated matrices).
-- The machine's speed moves, so each round runs every configuration once, lwopt and torch
-- alternating and the order rotated from round to round; a configuration's figures are the
-- best and the median tokens/s over the rounds (each run: the mean of its steps 6..N, as
-- bench/train_throughput.lua) and the median of the rounds' lwopt / torch ratios (paired: the
-- two runs of a round are minutes apart at most, so a load that comes and goes moves both),
-- the step breakdown of its best run, the Muon step (lwopt's time_ms.muon from its log against
-- torch's in training, and torch's Muon step alone), and,
-- in one more round of --loss-steps steps, the loss each reaches (the same initial weights and
-- batches on both sides, so they should agree closely; the global batch is 8 sequences at 1
-- process and 16 at 2 ranks, so rows of different rank counts differ).
-- torch: installed with apt-get when missing and running as root, else the command is printed
-- and the script exits 77.
-- Usage: bin/lwopt run bench/peers.lua [--steps 30] [--rounds 3] [--loss-steps 100]
--        [--muon-repeats 10] [--rows 1,2,3,4,5]   (from the repo root)
local dkjson = require("dkjson")
local peer = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/peer_runs.lua")

local SPEC = {
   { "steps", "int", 30, "steps per timing run (the first 5 are left out)", min = 6 },
   { "rounds", "int", 3, "timing rounds: every configuration once per round", min = 1 },
   { "loss-steps", "int", 100, "steps of the loss-check round (0: none)", min = 0 },
   { "muon-repeats", "int", 10, "Muon steps timed by torch_cpu.py --muon-step", min = 1 },
   { "rows", "string", "1,2,3,4,5", "the comparisons to run, by their row in the table" },
   { "help", "bool", false, "this text" },
}
local v = peer.flags(SPEC, "bench/peers.lua")

local PYTHON = peer.PYTHON
local PEER = "bench/peers/torch_cpu.py"
local SKIP = 5
local sh, first_line = peer.sh, peer.first_line

local torch_version = peer.torch_version()

-- One configuration of either side: name, and how to run it.
local LW = {
   adamw1 = { dp = 1, optimizer = "adamw" }, muon1 = { dp = 1, optimizer = "muon" },
   adamw2 = { dp = 2, optimizer = "adamw" }, muon2 = { dp = 2, optimizer = "muon" },
}
local PT = {
   adamw1 = { nproc = 1, threads = 2, optimizer = "adamw" },
   muon1 = { nproc = 1, threads = 2, optimizer = "muon" },
   adamw2 = { nproc = 2, threads = 1, optimizer = "adamw" },
   muon2 = { nproc = 2, threads = 1, optimizer = "muon" },
   muon2split = { nproc = 2, threads = 1, optimizer = "muon", split = true },
}
-- The table's rows: a label, lwopt's configuration and torch's.
local ALL_ROWS = {
   { "AdamW, 1 process x 2 threads", "adamw1", "adamw1" },
   { "Muon, 1 process x 2 threads", "muon1", "muon1" },
   { "AdamW, 2 ranks x 1 thread, vs DDP over gloo", "adamw2", "adamw2" },
   { "Muon, 2 ranks (layer-wise), vs DDP with Muon on every rank", "muon2", "muon2" },
   { "Muon, 2 ranks (layer-wise), vs DDP with Muon split across ranks + all_gather", "muon2",
     "muon2split" },
}
-- --rows: the rows chosen, and the configurations of each side they need (in table order)
local ROWS, lw_keys, pt_keys, seen = {}, {}, {}, {}
for i in v.rows:gmatch("[^,]+") do
   local row = ALL_ROWS[tonumber(i)]
   if row == nil then
      io.stderr:write(("--rows: no row %s (1-%d)\n"):format(i, #ALL_ROWS))
      os.exit(2)
   end
   ROWS[#ROWS + 1] = row
end
local function need(list, side, key)
   if not seen[side .. key] then list[#list + 1], seen[side .. key] = key, true end
end
for _, row in ipairs(ALL_ROWS) do
   for _, r in ipairs(ROWS) do
      if r == row then need(lw_keys, "lw", row[2]); need(pt_keys, "pt", row[3]) end
   end
end

-- lwopt: the recipe as bench/train_throughput.lua runs it; the means of steps 6..N of its log,
-- and the loss of the last step and the mean of the last 10.
local function run_lwopt(key, steps)
   local c = LW[key]
   local log = os.tmpname() .. ".jsonl"
   local launcher = c.dp == 1 and "OPENBLAS_NUM_THREADS=2 "
      or "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 "
      .. "-x OPENBLAS_NUM_THREADS=1 "
   local cmd = ("%sluajit recipes/gpt_small.lua --steps %d --optimizer %s --sample 0 --quiet "
      .. "--eval-every 0 --eval-max 1 --log %s > /dev/null"):format(launcher, steps, c.optimizer,
      log)
   assert(sh(cmd), "failed: " .. cmd)
   local sum, n, recs = { tps = 0 }, 0, {}
   for line in io.lines(log) do
      local r = dkjson.decode(line)
      if r.kind ~= "config" then recs[#recs + 1] = r end
      if r.kind ~= "config" and r.step > SKIP then
         n = n + 1
         for k, x in pairs(r.time_ms) do sum[k] = (sum[k] or 0) + x end
         sum.tps = sum.tps + r.tokens_per_s
      end
   end
   os.remove(log)
   os.remove((log:gsub("%.jsonl$", ".png")))
   os.remove((log:gsub("%.jsonl$", "")))
   for k, x in pairs(sum) do sum[k] = x / n end
   local last10 = 0
   local from = math.max(1, #recs - 9)
   for i = from, #recs do last10 = last10 + recs[i].loss / (#recs - from + 1) end
   sum.loss, sum.loss_last10 = recs[#recs].loss, last10
   return sum
end

-- torch: torch_cpu.py's RESULT line. OMP_WAIT_POLICY=passive: torch's OpenMP threads (its
-- elementwise ops) otherwise spin after each parallel region and take the 2 cores from
-- OpenBLAS's own threads (the GEMMs), which then wait for a core.
local function run_torch(key, steps, extra)
   local c = PT[key]
   local cmd = ("OMP_WAIT_POLICY=passive %s %s --nproc %d --threads %d --optimizer %s%s "
      .. "--steps %d --skip %d --quiet %s"):format(PYTHON, PEER, c.nproc, c.threads, c.optimizer,
      c.split and " --muon-split" or "", steps, math.min(SKIP, steps - 1), extra)
   local r = peer.result(cmd)
   if r.time_ms then
      local out2 = { tps = r.tokens_per_s, loss = r.loss, loss_last10 = r.loss_last10 }
      for k, x in pairs(r.time_ms) do out2[k] = x end
      return out2
   end
   return r
end

local median = peer.median

local load0 = first_line("/proc/loadavg")
print(("%s; torch %s (Debian python3-torch); %d rounds of %d steps (means over steps "
   .. "%d-%d), loss check %d steps"):format(peer.machine(), torch_version, v.rounds, v.steps,
   SKIP + 1, v.steps, v.loss_steps))
print("load average at the start: " .. load0)
io.stdout:flush()

-- Timing rounds: lwopt and torch alternate; the order rotates each round.
local order = {}
for i = 1, #pt_keys do
   if lw_keys[i] then order[#order + 1] = { "lw", lw_keys[i] } end
   order[#order + 1] = { "pt", pt_keys[i] }
end
for _, k in ipairs(pt_keys) do
   if k:match("^muon") then order[#order + 1] = { "alone", k } end
end

local runs = { lw = {}, pt = {}, alone = {} }
local t_start = os.time()
peer.rounds(order, v.rounds, function(item, round)
   local side, key = unpack(item)
   local r
   if side == "lw" then
      r = run_lwopt(key, v.steps)
   elseif side == "pt" then
      r = run_torch(key, v.steps, "--init fast")
   else
      r = run_torch(key, v.muon_repeats, "--init fast --muon-step")
   end
   runs[side][key] = runs[side][key] or {}
   table.insert(runs[side][key], r)
   io.stderr:write(("round %d: %s %s %s\n"):format(round, side, key, r.tps and
      ("%.0f tokens/s"):format(r.tps) or ("Muon step %.1f ms"):format(r.muon_step_ms_median)))
end)

-- best run (highest tokens/s) and median tokens/s of a configuration
local summary = peer.summary

print(("\nbest and median tokens/s over %d interleaved rounds; load average at the end: %s; "
   .. "%d min"):format(v.rounds, first_line("/proc/loadavg"), math.floor((os.time() - t_start)
   / 60 + 0.5)))
print("| comparison | lwopt best | lwopt median | torch best | torch median | ratio best | "
   .. "ratio median | ratio paired |")
print("|---|---|---|---|---|---|---|---|")
for _, row in ipairs(ROWS) do
   local lb, lm = summary(runs.lw[row[2]])
   local pb, pm = summary(runs.pt[row[3]])
   -- paired: the median over rounds of the round's lwopt / torch, two runs close in time
   print(("| %s | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f |"):format(row[1], lb.tps, lm,
      pb.tps, pm, lb.tps / pb.tps, lm / pm, peer.paired(runs.lw[row[2]], runs.pt[row[3]])))
end

print("\nstep breakdown of each configuration's best run, ms per step (lwopt's opt: the "
   .. "optimizer less its gradient and parameter syncs; torch's bwd includes DDP's all-reduce, "
   .. "its opt the clip, AdamW, Muon and the all_gather)")
print("| configuration | fwd | bwd | exposed comm | opt | of which Muon |")
print("|---|---|---|---|---|---|")
local LW_LABEL = { adamw1 = "lwopt AdamW, 1 x 2 threads", muon1 = "lwopt Muon, 1 x 2 threads",
   adamw2 = "lwopt AdamW, 2 ranks", muon2 = "lwopt Muon, 2 ranks (layer-wise)" }
local PT_LABEL = { adamw1 = "torch AdamW, 1 x 2 threads", muon1 = "torch Muon, 1 x 2 threads",
   adamw2 = "torch AdamW, DDP 2 ranks", muon2 = "torch Muon, DDP 2 ranks, every rank all",
   muon2split = "torch Muon, DDP 2 ranks, split + all_gather" }
for _, k in ipairs(lw_keys) do
   local b = summary(runs.lw[k])
   print(("| %s | %.0f | %.0f | %.0f | %.0f | %s |"):format(LW_LABEL[k], b.fwd, b.bwd,
      b.comm_wait, b.opt, k:match("muon") and ("%.0f"):format(b.muon) or "-"))
end
for _, k in ipairs(pt_keys) do
   local b = summary(runs.pt[k])
   print(("| %s | %.0f | %.0f | - | %.0f | %s |"):format(PT_LABEL[k], b.fwd, b.bwd, b.opt,
      k:match("muon") and ("%.0f%s"):format(b.muon, b.gather > 0
         and (" (all_gather %.0f)"):format(b.gather) or "") or "-"))
end

print(("\nthe Muon step, ms: lwopt's time_ms.muon (its log; this rank's matrices, momentum, "
   .. "Newton-Schulz and update) and torch's Muon in the same training runs (median over "
   .. "rounds of the runs' means), and torch's Muon step alone (--muon-step, %d steps, random "
   .. "gradients; median over rounds of each run's median; the slowest rank)"):format(
   v.muon_repeats))
print("| configuration | lwopt in training | torch in training | torch alone | of which "
   .. "all_gather | torch alone / lwopt |")
print("|---|---|---|---|---|---|")
local MUON_ROWS = { { "1 process x 2 threads", "muon1", "muon1" },
   { "2 ranks, torch every rank all 24", "muon2", "muon2" },
   { "2 ranks, torch split + all_gather", "muon2", "muon2split" } }
for _, row in ipairs(MUON_ROWS) do
   if runs.lw[row[2]] and runs.pt[row[3]] then
      local lw_ms, pt_ms, alone, gather = {}, {}, {}, {}
      for i, r in ipairs(runs.lw[row[2]]) do lw_ms[i] = r.muon end
      for i, r in ipairs(runs.pt[row[3]]) do pt_ms[i] = r.muon end
      for i, r in ipairs(runs.alone[row[3]]) do
         alone[i], gather[i] = r.muon_step_ms_median, r.gather_ms_median
      end
      print(("| %s | %.0f | %.0f | %.0f | %.0f | %.2f |"):format(row[1], median(lw_ms),
         median(pt_ms), median(alone), median(gather), median(alone) / median(lw_ms)))
   end
end

if v.loss_steps > 0 then
   -- both sides from the recipe's initial weights (torch_cpu.py --init recipe) and batches
   local lw_loss, pt_loss = {}, {}
   for _, k in ipairs(lw_keys) do lw_loss[k] = run_lwopt(k, v.loss_steps) end
   for _, k in ipairs(pt_keys) do pt_loss[k] = run_torch(k, v.loss_steps, "--init recipe") end
   print(("\nloss after %d steps (the recipe's schedule over %d steps; the same initial weights "
      .. "and batches on both sides; last: the loss of step %d, mean over ranks; last 10: mean "
      .. "of steps %d-%d)"):format(v.loss_steps, v.loss_steps, v.loss_steps,
      math.max(1, v.loss_steps - 9), v.loss_steps))
   print("| comparison | lwopt last | torch last | difference | lwopt last 10 | torch last 10 |")
   print("|---|---|---|---|---|---|")
   for _, row in ipairs(ROWS) do
      local a, b = lw_loss[row[2]], pt_loss[row[3]]
      print(("| %s | %.4f | %.4f | %+.4f | %.4f | %.4f |"):format(row[1], a.loss, b.loss,
         b.loss - a.loss, a.loss_last10, b.loss_last10))
   end
end
print(("\nload average at the end: %s; %d min in all"):format(first_line("/proc/loadavg"),
   math.floor((os.time() - t_start) / 60 + 0.5)))
