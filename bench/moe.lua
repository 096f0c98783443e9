-- bench/moe.lua: a small mixture of experts (recipes/gpt_small.lua --preset moe: 4 layers x 128,
-- 8 experts of hidden 512, top-2) on 2 ranks against the dense model with the same active
-- parameters per token (--n-expert 0 --mlp-hidden H, H chosen below), Muon layer-wise:
-- 1. throughput, the three configurations (dense, MoE at --ep 1, MoE at --ep 2) run interleaved
--    `rounds` times: tokens/s (best and median of the runs' means over steps 6..N, and the
--    median over rounds of each round's ratio to the dense run), the step's parts, bytes
--    communicated and of them all-to-all per step per rank, the Muon time of each rank, and the
--    tokens per EP rank (from the log's expert_counts);
-- 2. the layouts the runs use, rebuilt as lw.ddp builds them on each rank (dense buffers over
--    dp 2, expert buffers over the expert-DP group: 2 ranks at --ep 1, 1 at --ep 2, each EP rank
--    holding its experts): the expert buffers' padding, the Newton-Schulz FLOPs of each rank
--    (expert matrices alone and all Muon matrices) and their imbalance (max / mean);
--    and lw.stepmodel's prediction of each (the this-machine preset: forward + backward at the
--    same rate for every model, experts counted at topk / n_expert);
-- 3. validation loss over `quality_steps` steps (evaluation every `every`, 128 held-out
--    sequences): dense and MoE with Muon, MoE with AdamW, each at the learning rates `lrs`.
-- Usage: bin/lwopt run bench/moe.lua [steps] [rounds] [quality_steps] [every] [lrs]
--        (from the repo root; 30, 5, 300, 25 and 3e-3,1e-2 by default; quality_steps 0 skips
--        part 3; 41 minutes on the 2-core development machine at a load average of 5-7, of
--        which the throughput and layouts 7 to 12)
local lw = require("lwopt")
local recipe = require("lwopt.app.recipe")
local runs = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/recipe_runs.lua")

local steps = tonumber(arg[1]) or 30
local rounds = tonumber(arg[2]) or 5
local quality_steps = tonumber(arg[3]) or 300
local every = tonumber(arg[4]) or 25
local lrs = {}
for v in (arg[5] or "3e-3,1e-2"):gmatch("[^,]+") do lrs[#lrs + 1] = assert(tonumber(v), v) end
local DP = 2
local FIRST = 6 -- steps before this one warm up (allocation, first gathers)

-- The machine is shared: its load before and after says how much.
local function load()
   local f = io.open("/proc/loadavg")
   local text = f and f:read("*l") or "?"
   if f then f:close() end
   return text
end
print("load average at the start: " .. load())

-- ---- the models --------------------------------------------------------------------------

local preset = recipe.presets.moe
local E, K = preset.n_expert, recipe.MOE_DEFAULTS.topk
local moe_cfg = recipe.gpt_config("moe", 256)
local moe_specs = lw.arch.gpt(moe_cfg)
local expert_numel = 0
for _, s in ipairs(moe_specs) do
   if s.expert then expert_numel = expert_numel + s.shape[1] * s.shape[2] end
end
local total = lw.arch.numel(moe_specs)
local active = total - expert_numel + expert_numel * K / E
-- Per layer the MoE's tokens each pass a router (E x c) and K experts of 2 c He weights; a
-- dense MLP of hidden H has 2 c H: equal when H = K He + E / 2 (no biases).
local c, He = moe_cfg.n_embd, 4 * moe_cfg.n_embd
local H = K * He + E / 2
local dense_specs = lw.arch.gpt(recipe.gpt_config("moe", 256, nil, { n_expert = 0 }, H))
local dense_total = lw.arch.numel(dense_specs)
assert(dense_total == active, ("dense %d against MoE active %d"):format(dense_total, active))

print(("MoE: --preset moe, %d layers x %d, %d experts of hidden %d, top-%d: %d parameters, %d "
   .. "of them in experts; active per token %d (all but the experts, plus %d/%d of them)")
   :format(moe_cfg.n_layer, c, E, He, K, total, expert_numel, active, K, E))
print(("dense: --n-expert 0 --mlp-hidden %d: %d parameters. Per layer a token meets the router "
   .. "(%d x %d) and %d experts (2 x %d x %d each): 2 x %d x H = %d x 2 x %d x %d + %d x %d, so "
   .. "H = %d x %d + %d / 2 = %d"):format(H, dense_total, E, c, K, c, He, c, K, c, He, E, c, K,
   He, E, H))

-- ---- 1. throughput -----------------------------------------------------------------------

local configs = {
   { name = "dense", args = ("--n-expert 0 --mlp-hidden %d"):format(H), ep = 1 },
   { name = "moe ep 1", args = "--ep 1", ep = 1, experts = true },
   { name = "moe ep 2", args = "--ep 2", ep = 2, experts = true },
}

-- The busier EP rank's tokens over the mean, for an EP size (1: none), from a step record's
-- expert_counts (per layer, tokens per expert over the step's ranks): the mean over layers.
local function ep_load(rec, ep)
   if ep == 1 then return 1 end
   local sum = 0
   for _, layer in ipairs(rec.expert_counts) do
      local per, all, most = #layer / ep, 0, 0
      for j = 0, ep - 1 do
         local load = 0
         for e = j * per + 1, (j + 1) * per do load = load + layer[e] end
         all, most = all + load, math.max(most, load)
      end
      sum = sum + most / (all / ep)
   end
   return sum / #rec.expert_counts
end

local FIELDS = { tps = "tokens_per_s", fwd = "time_ms.fwd", bwd = "time_ms.bwd",
   comm_wait = "time_ms.comm_wait", opt = "time_ms.opt", muon0 = "by_rank.muon_ms.1",
   muon1 = "by_rank.muon_ms.2", comm0 = "by_rank.comm_mb.1", comm1 = "by_rank.comm_mb.2",
   a2a0 = "by_rank.alltoall_mb.1", a2a1 = "by_rank.alltoall_mb.2" }

local results = {}
if rounds > 0 then
   for _, cfg in ipairs(configs) do results[cfg.name] = {} end
   for round = 1, rounds do
      for _, cfg in ipairs(configs) do
         local records = runs.run{ ranks = DP, args = ("--preset moe --steps %d --eval-every 0 "
            .. "--eval-max 1 %s"):format(steps, cfg.args) }
         local fields = {}
         for k, v in pairs(FIELDS) do fields[k] = v end
         if cfg.experts then
            fields.load = function(rec) return ep_load(rec, cfg.ep) end
         end
         local r = runs.mean(records, FIRST, fields)
         local list = results[cfg.name]
         list[#list + 1] = r
         io.stderr:write(("round %d/%d %s: %.0f tokens/s\n"):format(round, rounds, cfg.name,
            r.tps))
      end
   end
   print(("\ndp %d, %d steps a run, %d interleaved rounds; tokens/s: best and median of the "
      .. "runs (each the mean over steps %d..%d); the other columns: the best run's means. MiB "
      .. "per step are what each rank sends (the comm counters, rank 0 / rank 1)."):format(DP,
      steps, rounds, FIRST, steps))
   print("| model | tokens/s best | tokens/s median | best vs dense | vs dense, median of the "
      .. "rounds | fwd ms | bwd ms | exposed comm ms | opt ms | Muon ms rank 0 / 1 | MiB sent / "
      .. "step | of it all-to-all | busier EP rank's tokens / mean |")
   print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
   local dense_best = runs.best(results.dense, "tps")
   for _, cfg in ipairs(configs) do
      local list = results[cfg.name]
      local b = runs.best(list, "tps")
      -- each round's runs ran minutes apart, so their ratio is the one the noise disturbs least
      local tps, ratio = {}, {}
      for i, r in ipairs(list) do tps[i], ratio[i] = r.tps, r.tps / results.dense[i].tps end
      print(("| %s | %.0f | %.0f | %.3f | %.3f | %.0f | %.0f | %.0f | %.0f | %.0f / %.0f | %.2f / "
         .. "%.2f | %.2f / %.2f | %s |"):format(cfg.name, b.tps, runs.median(tps),
         b.tps / dense_best.tps, runs.median(ratio), b.fwd, b.bwd, b.comm_wait, b.opt, b.muon0,
         b.muon1, b.comm0, b.comm1, b.a2a0, b.a2a1, b.load and ("%.3f"):format(b.load) or "-"))
   end
end

-- ---- 2. the layouts ------------------------------------------------------------------------

-- The specs EP rank j of ep holds: the dense ones and experts [j E/ep, (j + 1) E/ep) of every
-- layer, by global index (nn.MoE names them so).
local function rank_specs(specs, ep, j)
   local out, per = {}, E / ep
   for _, s in ipairs(specs) do
      local e = tonumber(s.name:match("%.experts%.(%d+)%."))
      if e == nil or math.floor(e / per) == j then out[#out + 1] = s end
   end
   return out
end

print("\nLayouts as lw.ddp builds them (cost, one bucket per buffer): dense buffers over dp 2, "
   .. "expert buffers over the expert-DP group; Newton-Schulz GFLOP per step per world rank "
   .. "(lw.stepmodel.ns_flops, 5 steps, full GEMMs)")
print("| model | expert-DP ranks | expert Muon buffers: elements | padding | NS GFLOP rank 0 / 1 "
   .. "(experts) | imbalance | NS GFLOP rank 0 / 1 (all Muon) | imbalance | step model: fwd + "
   .. "bwd ms | optimizer ms | step ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
local seq = moe_cfg.seq_len
local attention = { n_layer = moe_cfg.n_layer, n_embd = c, seq_len = seq }
for _, cfg in ipairs(configs) do
   local specs = cfg.experts and moe_specs or dense_specs
   local expert_dp = DP / cfg.ep
   local experts, all = {}, {}
   local numel, real, predicted = 0, 0, nil
   for r = 0, DP - 1 do
      -- world rank r is EP rank r % ep and expert-DP rank floor(r / ep) (lw.ep.groups)
      local l = lw.layout.compute(lw.route(rank_specs(specs, cfg.ep, r % cfg.ep)),
         { dp = DP, expert_dp = expert_dp, algorithm = "cost" })
      local ed = math.floor(r / cfg.ep)
      experts[r + 1], all[r + 1] = 0, 0
      for _, p in ipairs(l.params) do
         -- the cost layout gives every Muon matrix one owner: in its group's ranks
         if p.optimizer == "muon" and p.owner == (p.expert and ed or r) then
            local f = lw.stepmodel.ns_flops(p.shape)
            all[r + 1] = all[r + 1] + f
            if p.expert then experts[r + 1] = experts[r + 1] + f end
         end
      end
      -- the expert buffers of one expert-DP group (world rank 0's EP rank; the others alike),
      -- and the step predicted from rank 0's layout (its specs give the model's FLOPs per token)
      if r == 0 then
         predicted = lw.stepmodel.predict(l, { tokens = preset.batch * seq, topk = K,
            machine = "this-machine", attention = attention })
         for _, b in ipairs(l.buffers) do
            if b.key.expert and b.key.whole then
               numel = numel + b.numel
               for _, bucket in ipairs(b.buckets) do real = real + bucket.numel_unpadded end
            end
         end
      end
   end
   local function imbalance(t)
      local sum, most = 0, 0
      for _, v in ipairs(t) do sum, most = sum + v, math.max(most, v) end
      return sum > 0 and most / (sum / #t) or 1
   end
   print(("| %s | %d | %s | %s | %.2f / %.2f | %s | %.2f / %.2f | %.3f | %.0f | %.0f | %.0f |")
      :format(cfg.name, expert_dp, cfg.experts and tostring(numel) or "-",
      cfg.experts and ("%.2f%%"):format(100 * (numel - real) / real) or "-",
      experts[1] / 1e9, experts[2] / 1e9, cfg.experts and ("%.3f"):format(imbalance(experts))
      or "-", all[1] / 1e9, all[2] / 1e9, imbalance(all), 1e3 * predicted.compute,
      1e3 * predicted.optimizer, 1e3 * predicted.step))
end

-- ---- 3. validation loss --------------------------------------------------------------------

if quality_steps > 0 then
   local quality = {
      { name = "dense, muon", args = ("--n-expert 0 --mlp-hidden %d --optimizer muon"):format(H) },
      { name = "moe, muon", args = "--optimizer muon" },
      { name = "moe, adamw", args = "--optimizer adamw" },
   }
   print(("\nValidation loss (nats per byte, 128 held-out sequences), dp 2, %d steps (warmup "
      .. "%d, cosine to 10%%), the same data order; every %d steps"):format(quality_steps,
      math.floor(quality_steps / 10), every))
   local best = {}
   print("| model, optimizer | lr | final validation loss | tokens/s (mean) |")
   print("|---|---|---|---|")
   for _, q in ipairs(quality) do
      for _, lr in ipairs(lrs) do
         local records = runs.run{ ranks = DP, args = ("--preset moe --steps %d --lr %g "
            .. "--adamw-lr %g --warmup %d --eval-every %d --eval-max 128 %s"):format(
            quality_steps, lr, lr, math.floor(quality_steps / 10), every, q.args) }
         local curve, tps = {}, 0
         for _, rec in ipairs(records) do
            if rec.val_loss then curve[#curve + 1] = { rec.step, rec.val_loss } end
            tps = tps + rec.tokens_per_s / #records
         end
         local final = curve[#curve][2]
         print(("| %s | %g | %.4f | %.0f |"):format(q.name, lr, final, tps))
         if best[q.name] == nil or final < best[q.name].final then
            best[q.name] = { lr = lr, final = final, curve = curve }
         end
      end
   end
   print("\nEach at its best learning rate, validation loss by step:")
   local head, rule = "| step |", "|---|"
   for _, q in ipairs(quality) do
      head = head .. (" %s (lr %g) |"):format(q.name, best[q.name].lr)
      rule = rule .. "---|"
   end
   print(head)
   print(rule)
   for i, point in ipairs(best[quality[1].name].curve) do
      local row = ("| %d |"):format(point[1])
      for _, q in ipairs(quality) do row = row .. (" %.4f |"):format(best[q.name].curve[i][2]) end
      print(row)
   end
   -- the first evaluation at which one curve is at or below another's final loss
   local function reaches(a, b)
      for _, point in ipairs(best[a].curve) do
         if point[2] <= best[b].final then return point[1] end
      end
   end
   for _, pair in ipairs({ { "moe, muon", "dense, muon" }, { "moe, muon", "moe, adamw" } }) do
      local at = reaches(pair[1], pair[2])
      print(("%s reaches %s's final %.4f %s"):format(pair[1], pair[2], best[pair[2]].final,
         at and ("at step %d of %d (%.2f of the steps)"):format(at, quality_steps,
         at / quality_steps) or "not at all"))
   end
end
print("\nload average at the end: " .. load())
