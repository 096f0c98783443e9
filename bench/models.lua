-- bench/models.lua: recipes/gpt_small.lua --arch llama and --arch nanochat (small preset, bytes,
-- AdamW) against their PyTorch CPU peers, bench/peers/torch_models.py (Hugging Face's LLaMA and
-- nanochat's GPT written at the same shape, the same batches, schedule and AdamW), on this
-- machine, in one run: each model in 1 process x 2 threads (lwopt: OPENBLAS_NUM_THREADS=2;
-- torch: 2 intra-op and 2 OpenBLAS threads) and on 2 ranks x 1 thread (lwopt: mpirun -np 2;
-- torch: DDP over gloo).
-- As bench/peers.lua: each round runs every configuration once, lwopt and torch alternating and
-- the order rotated from round to round; a configuration's figures are the best and the median
-- tokens/s over the rounds (each run: the mean of its steps 6..N) and the median of the rounds'
-- lwopt / torch ratios (paired). Memory per rank: lwopt's own peak (its log's memory_mb.peak:
-- parameters, gradients, optimizer state and activations as it accounts them) and its process's
-- peak RSS (/usr/bin/time's %M for each rank), against torch's peak RSS (ru_maxrss), the
-- largest of the rounds. The two sides' parameter counts must be equal (an error otherwise).
-- Then, per model, a loss check of --loss-steps steps in 1 process: torch draws the weights and
-- writes them in lwopt's names, lwopt starts from them (--init-from), and the losses of step 1
-- (the same forward) and of the last 10 steps are compared.
-- A model the recipe does not know yet (--arch refused) is skipped with a line saying so.
-- torch: installed with apt-get when missing and running as root, else the script exits 77.
-- Usage: bin/lwopt run bench/models.lua [--steps 30] [--rounds 3] [--loss-steps 30]
--        [--archs llama,nanochat] [--ranks 1,2] [--n-kv-head K] [--lwopt-root DIR]
--        (from the repo root)
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local peer = dofile(here .. "/peer_runs.lua")
local runs = dofile(here .. "/recipe_runs.lua")

local SPEC = {
   { "steps", "int", 30, "steps per timing run (the first 5 are left out)", min = 6 },
   { "rounds", "int", 3, "timing rounds: every configuration once per round", min = 1 },
   { "loss-steps", "int", 30, "steps of the same-weights loss check (0: none)", min = 0 },
   { "archs", "string", "llama,nanochat", "the models (--arch of the recipe)" },
   { "ranks", "string", "1,2", "layouts: 1 = 1 process x 2 threads, 2 = 2 ranks x 1 thread" },
   { "n-kv-head", "int", 4, "KV heads of both sides (4: the small preset's for --arch llama)",
     min = 1 },
   { "lwopt-root", "string", ".", "the lwopt checkout whose recipe runs (built; e.g. a branch's "
     .. "worktree)" },
   { "help", "bool", false, "this text" },
}
local v = peer.flags(SPEC, "bench/models.lua")

local RECIPE = "recipes/gpt_small.lua"
local PEER = "bench/peers/torch_models.py"
local SKIP = 5
local LAYOUTS = {
   [1] = { ranks = 1, threads = 2, label = "1 process x 2 threads" },
   [2] = { ranks = 2, threads = 1, label = "2 ranks x 1 thread (torch: DDP over gloo)" },
}
local KNOWN_ARCHS = { llama = true, nanochat = true }
-- The peer's AdamW and schedule (torch_cpu.py's constants), pinned on lwopt's side: an
-- architecture may default to learning rates of its own per group (nanochat's), and one lr for
-- every group is what the peer runs.
local OPTIMIZER = "--optimizer adamw --adamw-lr 3e-3 --embedding-lr 3e-3 --scalar-lr 3e-3 "
   .. "--adamw-beta1 0.9 --adamw-beta2 0.95 --adamw-eps 1e-8 --weight-decay 0.1 --clip 1 "
   .. "--warmup 50 --min-lr-ratio 0.1"

local function list(text, what, check)
   local out = {}
   for item in text:gmatch("[^,]+") do
      local ok, why = check(item)
      if not ok then
         io.stderr:write(("--%s: %s\n"):format(what, why))
         os.exit(2)
      end
      out[#out + 1] = item
   end
   return out
end
local archs = list(v.archs, "archs", function(a)
   return KNOWN_ARCHS[a], ("no peer for '%s' (llama, nanochat)"):format(a)
end)
local layouts = list(v.ranks, "ranks", function(r)
   return LAYOUTS[tonumber(r)], ("no layout '%s' (1: 1 process x 2 threads, 2: 2 ranks)"):format(r)
end)

local torch_version = peer.torch_version()
if not peer.sh("test -x /usr/bin/time") then
   io.stderr:write("bench/models.lua: lwopt's peak RSS needs /usr/bin/time (Debian: apt-get "
      .. "install time)\n")
   os.exit(1)
end
local kv_flag = (" --n-kv-head %d"):format(v.n_kv_head)

-- The models the recipe knows; the others are skipped, saying why (its own refusal).
local root = v.lwopt_root
local probe = "cd '" .. root .. "' && luajit " .. RECIPE .. " --arch %s --help"
local skipped = {}
local configs = {}
for _, arch in ipairs(archs) do
   if peer.sh(probe:format(arch) .. " > /dev/null 2>&1") then
      for _, r in ipairs(layouts) do
         local l = LAYOUTS[tonumber(r)]
         configs[#configs + 1] = { arch = arch, ranks = l.ranks, threads = l.threads,
            label = l.label, lw = {}, pt = {} }
      end
   else
      local why = peer.read(probe:format(arch) .. " 2>&1 > /dev/null"):gsub("%s+$", "")
      skipped[#skipped + 1] = ("%s: skipped, %s%s does not know --arch %s yet (it says: %s)")
         :format(arch, root == "." and "" or root .. "/", RECIPE, arch, why)
   end
end
for _, line in ipairs(skipped) do print(line) end
if #configs == 0 then
   print("nothing to measure: the recipe knows none of --archs " .. v.archs)
   os.exit(77)
end

-- A temporary wrapper that runs a rank's command under /usr/bin/time, its peak RSS (KiB) into
-- <base>.<rank> (Open MPI names the rank in the environment; one process: rank 0).
local function rss_wrapper()
   local base = os.tmpname()
   local f = assert(io.open(base .. ".sh", "w"))
   f:write(('exec /usr/bin/time -f %%M -o "%s.${OMPI_COMM_WORLD_RANK:-0}" "$@"\n'):format(base))
   f:close()
   return base
end

-- Each rank's peak RSS, MiB, from the wrapper's files (their last number: time prefixes a line
-- when the command failed); the files removed.
local function rss_by_rank(base, ranks)
   local out = {}
   for r = 0, ranks - 1 do
      local f = assert(io.open(("%s.%d"):format(base, r)), "no peak RSS from rank " .. r)
      local kib
      for n in f:read("*a"):gmatch("%d+") do kib = tonumber(n) end
      f:close()
      os.remove(("%s.%d"):format(base, r))
      out[r + 1] = assert(kib, "no peak RSS from rank " .. r) / 1024
   end
   os.remove(base .. ".sh")
   os.remove(base)
   return out
end

-- lwopt: the recipe under the RSS wrapper; the means of steps 6..N of its log, each rank's
-- largest memory_mb.peak over the steps, its peak RSS and the model's parameter count.
local function run_lwopt(c, steps, extra)
   local base = rss_wrapper()
   local records, _, config = runs.run({ ranks = c.ranks, threads = c.threads,
      root = root ~= "." and root or nil, wrap = "sh " .. base .. ".sh",
      args = ("--arch %s --preset small %s --steps %d --eval-every 0 --eval-max 1%s%s"):format(
         c.arch, OPTIMIZER, steps, kv_flag, extra or "") })
   local r = runs.mean(records, SKIP + 1, { tps = "tokens_per_s", fwd = "time_ms.fwd",
      bwd = "time_ms.bwd", opt = "time_ms.opt", comm = "time_ms.comm_wait" })
   r.peak = {}
   for _, rec in ipairs(records) do
      for i, mb in ipairs(rec.memory_mb.peak) do r.peak[i] = math.max(r.peak[i] or 0, mb) end
   end
   r.rss = rss_by_rank(base, c.ranks)
   r.loss_first = records[1].loss
   r.loss_last10 = runs.mean(records, math.max(1, #records - 9), { l = "loss" }).l
   r.parameters = config.model.parameters
   return r
end

-- torch: torch_models.py's RESULT line. OMP_WAIT_POLICY=passive as bench/peers.lua runs
-- torch_cpu.py (its OpenMP threads would otherwise spin and take the cores from OpenBLAS's).
local function run_torch(c, steps, extra)
   local r = peer.result(("OMP_WAIT_POLICY=passive %s %s --arch %s --nproc %d --threads %d "
      .. "--steps %d --skip %d --quiet%s%s"):format(peer.PYTHON, PEER, c.arch, c.ranks, c.threads,
      steps, math.min(SKIP, steps - 1), kv_flag, extra or ""))
   return { tps = r.tokens_per_s, fwd = r.time_ms.fwd, bwd = r.time_ms.bwd, opt = r.time_ms.opt,
      loss_first = r.loss_first, loss_last10 = r.loss_last10, rss = r.rss_mb,
      parameters = r.parameters }
end

local t_start = os.time()
print(("%s; torch %s (Debian python3-torch); AdamW, small preset on bytes; %d rounds of %d "
   .. "steps (means over steps %d-%d)"):format(peer.machine(), torch_version, v.rounds, v.steps,
   SKIP + 1, v.steps))
print("load average at the start: " .. peer.first_line("/proc/loadavg"))
io.stdout:flush()

local order = {}
for _, c in ipairs(configs) do
   order[#order + 1] = { side = "lw", c = c }
   order[#order + 1] = { side = "pt", c = c }
end
-- The same model on both sides, or no comparison: checked once a configuration has run on both.
local function same_size(c)
   local a, b = c.lw[1].parameters, c.pt[1].parameters
   if a ~= b then
      error(("%s: lwopt builds %d parameters, %s %d: the peer is not lwopt's model"):format(
         c.arch, a, PEER, b), 0)
   end
end

peer.rounds(order, v.rounds, function(item, round)
   local c = item.c
   local r = item.side == "lw" and run_lwopt(c, v.steps) or run_torch(c, v.steps)
   table.insert(c[item.side], r)
   io.stderr:write(("round %d: %s %s, %s: %.0f tokens/s\n"):format(round, item.side == "lw"
      and "lwopt" or "torch", c.arch, c.label, r.tps))
   if #c.lw == 1 and #c.pt == 1 then same_size(c) end
end)
local counted = {}
for _, c in ipairs(configs) do
   if not counted[c.arch] then
      counted[c.arch] = true
      print(("%s: %d parameters on both sides"):format(c.arch, c.lw[1].parameters))
   end
end

print(("\nbest and median tokens/s over %d interleaved rounds; load average at the end: %s"):
   format(v.rounds, peer.first_line("/proc/loadavg")))
print("| model | layout | lwopt best | lwopt median | torch best | torch median | ratio best | "
   .. "ratio median | ratio paired |")
print("|---|---|---|---|---|---|---|---|---|")
for _, c in ipairs(configs) do
   local lb, lm = peer.summary(c.lw)
   local pb, pm = peer.summary(c.pt)
   print(("| %s | %s | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f |"):format(c.arch, c.label,
      lb.tps, lm, pb.tps, pm, lb.tps / pb.tps, lm / pm, peer.paired(c.lw, c.pt)))
end

-- Each rank's largest value over the rounds, "a / b" for 2 ranks; and that list's largest.
local function per_rank(runs_list, key)
   local top = {}
   for _, r in ipairs(runs_list) do
      for i, x in ipairs(r[key]) do top[i] = math.max(top[i] or 0, x) end
   end
   local text, most = {}, 0
   for i, x in ipairs(top) do text[i], most = ("%.0f"):format(x), math.max(most, x) end
   return table.concat(text, " / "), most
end

print("\nmemory per rank, MiB (rank 0 / rank 1; the largest over the rounds): lwopt's own peak "
   .. "(parameters, gradients, optimizer state, activations), its process's peak RSS, torch's "
   .. "peak RSS, and torch's RSS over lwopt's (the largest ranks)")
print("| model | layout | lwopt tensors peak | lwopt peak RSS | torch peak RSS | "
   .. "torch / lwopt RSS |")
print("|---|---|---|---|---|---|")
for _, c in ipairs(configs) do
   local peak = per_rank(c.lw, "peak")
   local lw_rss, lw_most = per_rank(c.lw, "rss")
   local pt_rss, pt_most = per_rank(c.pt, "rss")
   print(("| %s | %s | %s | %s | %s | %.2f |"):format(c.arch, c.label, peak, lw_rss, pt_rss,
      pt_most / lw_most))
end

print("\nstep breakdown of each configuration's best run, ms per step (lwopt's opt: the optimizer "
   .. "less its gradient syncs, shown as exposed comm; torch's bwd includes DDP's all-reduce, its "
   .. "opt the clip and AdamW)")
print("| model | layout | side | fwd | bwd | exposed comm | opt |")
print("|---|---|---|---|---|---|---|")
for _, c in ipairs(configs) do
   local lb, pb = peer.summary(c.lw), peer.summary(c.pt)
   print(("| %s | %s | lwopt | %.0f | %.0f | %.0f | %.0f |"):format(c.arch, c.label, lb.fwd,
      lb.bwd, lb.comm, lb.opt))
   print(("| %s | %s | torch | %.0f | %.0f | - | %.0f |"):format(c.arch, c.label, pb.fwd, pb.bwd,
      pb.opt))
end

if v.loss_steps > 0 then
   -- The same model, checked: torch draws the initial weights and writes them in lwopt's names,
   -- lwopt starts from them (--init-from); both train on the same batches, 1 process x 2 threads.
   print(("\nthe loss from the same initial weights (torch's draws, read by lwopt's --init-from) "
      .. "on the same batches, 1 process x 2 threads, %d steps: step 1 (the same forward: equal "
      .. "up to rounding when the two are the same model), and the mean of the last 10 steps (all "
      .. "of them when fewer)")
      :format(v.loss_steps))
   print("| model | lwopt step 1 | torch step 1 | difference | lwopt last 10 | torch last 10 | "
      .. "difference |")
   print("|---|---|---|---|---|---|---|")
   local done = {}
   for _, c in ipairs(configs) do
      if not done[c.arch] then
         done[c.arch] = true
         local one = { arch = c.arch, ranks = 1, threads = 2 }
         local init = os.tmpname()
         local pt = run_torch(one, v.loss_steps, " --save-init " .. init)
         local lw = run_lwopt(one, v.loss_steps, " --init-from " .. init)
         os.remove(init)
         print(("| %s | %.5f | %.5f | %+.5f | %.4f | %.4f | %+.4f |"):format(c.arch, lw.loss_first,
            pt.loss_first, pt.loss_first - lw.loss_first, lw.loss_last10, pt.loss_last10,
            pt.loss_last10 - lw.loss_last10))
      end
   end
end
for _, line in ipairs(skipped) do print(line) end
print(("\n%d min in all"):format(math.floor((os.time() - t_start) / 60 + 0.5)))
