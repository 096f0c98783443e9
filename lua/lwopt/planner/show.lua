-- planner/show.lua: lw.stepmodel's text: a prediction as a table (stepmodel.table), and
-- every whole-matrix algorithm side by side for one model and dp (stepmodel.compare,
-- compare_table; `lwopt layout --compare`). The model itself is in the other planner modules.
local stepmodel = require("lwopt.planner")

local show = {}

local function ms(seconds)
   if seconds == nil then return "-" end
   local v = seconds * 1e3
   if v == 0 then return "0" end
   if math.abs(v) >= 100 then return ("%.0f"):format(v) end
   if math.abs(v) >= 10 then return ("%.1f"):format(v) end
   if math.abs(v) >= 0.01 then return ("%.2f"):format(v) end
   return ("%.4f"):format(v)
end

local function mb(bytes) return ("%.2f"):format(bytes / 1e6) end

local function rate(x, unit)
   local prefixes = { { 1e15, "P" }, { 1e12, "T" }, { 1e9, "G" }, { 1e6, "M" }, { 1e3, "K" } }
   for _, p in ipairs(prefixes) do
      if x >= p[1] then return ("%.3g %s%s"):format(x / p[1], p[2], unit) end
   end
   return ("%.3g %s"):format(x, unit)
end

local function commas(n)
   local s = ("%d"):format(n)
   return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end

-- The ranks shown: all up to 16, else the 8 slowest and the fastest.
local function shown_ranks(result)
   local order = {}
   for r = 1, #result.ranks do order[r] = r end
   if #order <= 16 then return order, 0 end
   table.sort(order, function(a, b)
      local x, y = result.ranks[a].total, result.ranks[b].total
      if x ~= y then return x > y end
      return a < b
   end)
   local shown = { unpack(order, 1, 8) }
   shown[#shown + 1] = order[#order]
   return shown, #order - #shown
end

-- lw.stepmodel.table(result [, { buckets = max rows }]): the prediction as text: the inputs, one
-- row per bucket group, the optimizer per rank and the step's breakdown.
function show.table(result, opts)
   opts = opts or {}
   local m, lines = result.machine, {}
   local function add(s) lines[#lines + 1] = s end
   add(("step-time model  machine %s  dp %d  ZeRO-%d  %s tokens per rank  %.4g GFLOP per token")
      :format(m.name, result.layout.dp, result.zero, commas(result.tokens),
         result.flops_per_token / 1e9))
   if m.description ~= "" then add("  " .. m.description) end
   add(("  model %s, Newton-Schulz %s (%d steps, full-GEMM FLOPs), element-wise %s%s")
      :format(rate(m.model_flops * result.share, "FLOP/s"), rate(m.ns_flops * result.share,
         "FLOP/s"), result.ns_steps, rate(m.mem_bandwidth * result.share, "B/s"),
         result.share < 1 and (" (%d ranks share %g cores)"):format(#result.ranks, m.cores) or ""))
   local link = ("  link: %s bus, %s us per step"):format(rate(m.intra.bandwidth, "B/s"),
      ("%.3g"):format(m.intra.latency * 1e6))
   if m.intra.rs_bandwidth or m.intra.ag_bandwidth then
      link = ("  link: reduce-scatter %s, all-gather %s bus, %s us per step"):format(
         rate(m.intra.rs_bandwidth or m.intra.bandwidth, "B/s"),
         rate(m.intra.ag_bandwidth or m.intra.bandwidth, "B/s"),
         ("%.3g"):format(m.intra.latency * 1e6))
   end
   if m.inter then
      link = link .. ("; across nodes of %d: %s, %s us per step"):format(m.devices_per_node,
         rate(m.inter.bandwidth, "B/s"), ("%.3g"):format(m.inter.latency * 1e6))
   end
   add(link .. ("; unequal shards: %s"):format(m.variable))
   add("")
   add("buckets, in forward order (one link, one collective at a time; reduce-scatter times from "
      .. "the start of backward, all-gather times from the start of forward; ms)")
   add("| group | buffer | bucket | layout | elements | padding | reduce-scatter MB | ms | ready "
      .. "| start | stop | all-gather MB | ms | start | stop |")
   add("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
   local limit = opts.buckets or math.huge
   for k, b in ipairs(result.buckets) do
      if k > limit then
         add(("| ... %d more |"):format(#result.buckets - limit))
         break
      end
      local what = b.optimizer .. (b.expert and " expert" or "")
      add(("| %d | %d %s | %d | %s%s | %s | %.1f%% | %s | %s | %s | %s | %s | %s | %s | %s | %s |")
         :format(k, b.buffer, what, b.bucket, b.algorithm,
            b.kind == "all-reduce" and " (all-reduce)" or "", commas(b.numel),
            b.numel > 0 and 100 * (b.numel - b.real) / b.numel or 0, mb(b.rs.bytes), ms(b.rs.time),
            ms(b.ready), ms(b.rs.start), ms(b.rs.stop), b.ag and mb(b.ag.bytes) or "-",
            b.ag and ms(b.ag.time) or "-", b.ag and ms(b.ag.start) or "-",
            b.ag and ms(b.ag.stop) or "-"))
   end
   add("")
   add("optimizer per rank, after the reduce-scatters (Newton-Schulz of the matrices it "
      .. "orthogonalises + element-wise updates" .. (result.muon_option_bytes > 0
      and (", with Muon's options' %d bytes per element orthogonalised"):format(
         result.muon_option_bytes) or "") .. "; ms)")
   add("| rank | matrices | Newton-Schulz GFLOP | Newton-Schulz | element-wise | total |")
   add("|---|---|---|---|---|---|")
   local shown, hidden = shown_ranks(result)
   for _, r in ipairs(shown) do
      local w = result.ranks[r]
      add(("| %d%s | %d | %.2f | %s | %s | %s |"):format(r - 1,
         r - 1 == result.slowest and " (slowest)" or "", w.matrices, w.ns_flops / 1e9, ms(w.ns),
         ms(w.elementwise), ms(w.total)))
   end
   if hidden > 0 then add(("| (%d more ranks) |"):format(hidden)) end
   add("")
   local e = result.exposed
   add("step (ms)")
   add("| part | ms |")
   add("|---|---|")
   add(("| forward compute | %s |"):format(ms(result.forward)))
   add(("| all-gathers waited for in forward | %s |"):format(ms(e.forward)))
   add(("| backward compute | %s |"):format(ms(result.backward)))
   if result.zero == 3 then
      add(("| all-gathers waited for in backward (ZeRO-3) | %s |"):format(ms(e.backward)))
   end
   add(("| reduce-scatters past the end of backward | %s |"):format(ms(e.reduce)))
   add(("| gradient-norm all-reduce | %s |"):format(ms(e.norm)))
   if e.optimizer > 0 then
      add(("| gathers inside the optimizer | %s |"):format(ms(e.optimizer)))
   end
   add(("| optimizer, slowest rank (%d) | %s |"):format(result.slowest, ms(result.optimizer)))
   add(("| **step** | **%s** |"):format(ms(result.step)))
   add(("exposed communication %s ms; %s MB sent per rank per step (the most any rank sends, "
      .. "bucket by bucket)"):format(ms(e.total), mb(result.wire_bytes)))
   return table.concat(lines, "\n")
end

-- ---- comparing layouts ---------------------------------------------------------------------

-- The algorithms compare lays out: the whole-matrix ones, then the row-sharded references.

-- lw.stepmodel.compare(specs, layout_opts, predict_opts [, algorithms]): for each algorithm
-- (default compare_algorithms) the layout of specs with layout_opts (its algorithm replaced),
-- its stats and its prediction: a list of { algorithm, layout, stats, result }.
function show.compare(specs, layout_opts, predict_opts, algorithms)
   local layout_mod = require("lwopt.layout")
   local rows = {}
   for _, algorithm in ipairs(algorithms or stepmodel.compare_algorithms) do
      local o = {}
      for k, v in pairs(layout_opts or {}) do o[k] = v end
      o.algorithm = algorithm
      local l = layout_mod.compute(specs, o)
      rows[#rows + 1] = { algorithm = algorithm, layout = l, stats = l:stats(),
         result = stepmodel.predict(l, predict_opts) }
   end
   return rows
end

local NOTES = {
   packed = "unequal shards (variable-count collectives)",
   distopt = "every rank orthogonalises every matrix",
   rows = "every rank orthogonalises every matrix",
}

-- lw.stepmodel.compare_table(rows): compare's rows side by side.
function show.compare_table(rows)
   local lines = {}
   local first = rows[1] and rows[1].result
   if first then
      lines[1] = ("compare  machine %s  dp %d  ZeRO-%d  %s tokens per rank  bucket_size %s")
         :format(first.machine.name, first.layout.dp, first.zero, commas(first.tokens),
            first.layout.bucket_size and commas(first.layout.bucket_size) or "none")
   end
   lines[#lines + 1] = "| algorithm | Muon buckets | Muon padding | MB sent per rank per step | "
      .. "cost imb. | cost / bound | Newton-Schulz ms (slowest) | exposed comm ms | step ms | "
      .. "note |"
   lines[#lines + 1] = "|---|---|---|---|---|---|---|---|---|---|"
   for _, row in ipairs(rows) do
      local s, r = row.stats, row.result
      local buckets = 0
      for _, b in ipairs(row.layout.buffers) do
         if b.key.whole then buckets = buckets + #b.buckets end
      end
      -- element-wise and row-sharded Muon: every rank orthogonalises everything, so the
      -- owned-cost balance does not apply
      local whole = NOTES[row.algorithm] == nil or row.algorithm == "packed"
      lines[#lines + 1] = ("| %s | %d | %.2f%% | %s | %s | %s | %s | %s | %s | %s |"):format(
         row.algorithm, buckets, 100 * s.muon_overhead, mb(r.wire_bytes),
         whole and ("%.3f"):format(s.cost_imbalance) or "-",
         whole and ("%.3f"):format(s.cost_imbalance / s.cost_imbalance_bound) or "-",
         ms(r.ranks[r.slowest + 1].ns),
         ms(r.exposed.total), ms(r.step), NOTES[row.algorithm] or "")
   end
   return table.concat(lines, "\n")
end

return show
