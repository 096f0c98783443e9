-- predict.lua: the planner's simulation of one step (lw.stepmodel.predict): bucket groups as
-- lw_buffers forms them, forward and backward with their collectives on one link, then the
-- optimizer. Machines and cost formulas come from machines.lua and costs.lua.
local errors = require("lwopt.errors")
local machines = require("lwopt.planner.machines")
local costs = require("lwopt.planner.costs")
local kinds = require("lwopt.optim_kinds")

local predict = {}

local fail = errors.failer("lw.stepmodel")

local positive, non_negative = machines.positive, machines.non_negative
local bytes_sent, equal_shards = costs.bytes_sent, costs.equal_shards
local numel_of = costs.numel_of
local token_weights, DTYPE_BYTES = costs.token_weights, costs.DTYPE_BYTES

local function make_groups(layout)
   local groups, slot, param_group = {}, {}, {}
   for i, p in ipairs(layout.params) do
      local key = p.buffer * 2 ^ 24 + p.bucket
      if slot[key] == nil then
         groups[#groups + 1] = { buffer = p.buffer, bucket = p.bucket, n_params = 0 }
         slot[key] = #groups
      end
      param_group[i] = slot[key]
      local g = groups[slot[key]]
      g.n_params = g.n_params + 1
   end
   return groups, param_group
end

-- The uses of parameters in a forward pass, in order, each { param, weight }: definition order;
-- a shared embedding is looked up first (no FLOPs) and used again as the LM head at the end.
local function forward_uses(layout, weights)
   local uses = {}
   for i, p in ipairs(layout.params) do
      uses[#uses + 1] = { param = i, weight = p.shared_embedding and 0 or weights[i] }
   end
   for i, p in ipairs(layout.params) do
      if p.shared_embedding then uses[#uses + 1] = { param = i, weight = weights[i] } end
   end
   return uses
end

-- Per-group collectives: reduce-scatter (or all-reduce for an unsharded buffer) and all-gather,
-- seconds and the most bytes a rank sends.
local function group_collectives(layout, machine, groups)
   for _, g in ipairs(groups) do
      local buffer = layout.buffers[g.buffer]
      local bucket = buffer.buckets[g.bucket]
      local p = buffer.dp
      local grad_bytes = DTYPE_BYTES[buffer.key.grad_dtype]
      local param_bytes = DTYPE_BYTES[buffer.key.param_dtype]
      local size = bucket.stop - bucket.start
      g.algorithm, g.optimizer, g.expert = buffer.algorithm, buffer.key.optimizer, buffer.key.expert
      g.numel, g.real, g.dp = size, bucket.numel_unpadded, p
      if buffer.algorithm == "default" or buffer.algorithm == "legacy" then
         -- unsharded: the gradients are all-reduced (a ring: reduce-scatter + all-gather)
         local shards = equal_shards(size * grad_bytes, p)
         g.kind = "all-reduce"
         g.rs = { bytes = 2 * bytes_sent(shards),
                  time = costs.collective_time(machine, "rs", shards)
                     + costs.collective_time(machine, "ag", shards) }
         g.shard_max, g.shard_min = size, size
      else
         local counts = {}
         if bucket.shards then
            for r, sh in ipairs(bucket.shards) do counts[r] = sh.count end
         else
            for r = 1, p do counts[r] = bucket.shard_size end
         end
         local lo, hi, grads, params = math.huge, 0, {}, {}
         for r, c in ipairs(counts) do
            lo, hi = math.min(lo, c), math.max(hi, c)
            grads[r], params[r] = c * grad_bytes, c * param_bytes
         end
         g.kind = bucket.shards and "variable" or "equal"
         g.shard_max, g.shard_min = hi, lo
         g.rs = { bytes = bytes_sent(grads),
                  time = costs.collective_time(machine, "rs", grads) }
         g.ag = { bytes = bytes_sent(params),
                  time = costs.collective_time(machine, "ag", params) }
      end
   end
end

-- A link that runs one collective at a time, in the order they are issued.
local function new_link()
   return { free = 0 }
end

local function run_on(link, at, seconds)
   local start = math.max(at, link.free)
   link.free = start + seconds
   return start, link.free
end

-- A group's all-gather issued at time `at`: its start and stop on the link (both `at` for a
-- group without one, unsharded).
local function gather_on(link, at, g)
   if g.ag then return run_on(link, at, g.ag.time) end
   return at, at
end

-- Compute at time t waits for a gather that stops at `stop`: the new t and waited.
local function wait_for(t, waited, stop)
   if stop > t then return stop, waited + stop - t end
   return t, waited
end

-- Forward: lw_buffers starts the all-gather of group 1 when the optimizer step ends (time 0);
-- the pre-hook of a group's first use waits for its gather (and any before it) and starts the
-- next group's. Returns the forward's end (compute plus waits) and sets each group's ag_start,
-- ag_stop. Groups without an all-gather (unsharded) never wait.
local function forward_pass(groups, param_group, uses, seconds, total_weight)
   local link, t, waited = new_link(), 0, 0
   local issued, done = 0, 0
   local function issue(k)
      local g = groups[k]
      g.ag_start, g.ag_stop = gather_on(link, t, g)
      issued = k
   end
   if #groups > 0 then issue(1) end
   for _, u in ipairs(uses) do
      local k = param_group[u.param]
      if k > done then
         for j = done + 1, k do
            if j > issued then issue(j) end
            t, waited = wait_for(t, waited, groups[j].ag_stop)
         end
         done = k
         if issued == k and k < #groups then issue(k + 1) end -- prefetch
      end
      if total_weight > 0 then t = t + seconds * u.weight / total_weight end
   end
   return t, waited
end

-- Backward: uses in reverse; a parameter's gradient is ready after its last use in backward;
-- a group's reduce-scatter is issued once the group is complete and every group after it in
-- forward order has been issued (lw_buffers' start_ready_grads). At ZeRO-3 a group's parameters
-- are gathered again before its first use in backward (except the group forward ended in, still
-- held), the next group's gather issued as a group starts (prefetch), on the same link.
-- Returns the backward's end (compute plus gather waits), its gather waits and the end of the
-- last reduce-scatter.
local function backward_pass(groups, param_group, uses, seconds, total_weight, zero, held)
   local link, t, waited = new_link(), 0, 0
   -- backward runs the uses from #uses down to 1: its last use of a parameter is the first
   -- in forward order (a shared embedding's lookup, after its use as the LM head)
   local last_use = {}
   for n = 1, #uses do
      local i = uses[n].param
      if last_use[i] == nil then last_use[i] = n end
   end
   -- the groups in the order backward first uses them
   local order, seen = {}, {}
   for n = #uses, 1, -1 do
      local k = param_group[uses[n].param]
      if not seen[k] then
         seen[k] = true
         order[#order + 1] = k
      end
   end
   local position = {}
   for n, k in ipairs(order) do position[k] = n end
   local ready, next_grad, started = {}, #groups, {}
   for _, g in ipairs(groups) do g.ready_count = 0 end
   local function gather(k)
      local g = groups[k]
      g.ag3_start, g.ag3_stop = gather_on(link, t, g)
   end
   for n = #uses, 1, -1 do
      local u = uses[n]
      local k = param_group[u.param]
      if zero == 3 and not started[k] then
         started[k] = true
         if not held[k] then
            if groups[k].ag3_stop == nil then gather(k) end
            t, waited = wait_for(t, waited, groups[k].ag3_stop)
         end
         local nk = order[position[k] + 1]
         if nk and not held[nk] and groups[nk].ag3_stop == nil then gather(nk) end
      end
      if total_weight > 0 then t = t + seconds * u.weight / total_weight end
      if last_use[u.param] == n then
         local g = groups[k]
         g.ready_count = g.ready_count + 1
         if g.ready_count == g.n_params then
            g.ready = t
            ready[k] = true
         end
         while next_grad >= 1 and ready[next_grad] do
            local h = groups[next_grad]
            h.rs_start, h.rs_stop = run_on(link, t, h.rs.time)
            next_grad = next_grad - 1
         end
      end
   end
   return t, waited, link.free
end

-- ---- the optimizer -------------------------------------------------------------------------

-- Per rank (1-based: rank r at r + 1, over the largest buffer dp): Newton-Schulz FLOPs, matrices
-- (a fused QKV weight three under Muon's split_qkv) and their elements (orthogonalised), and
-- the elements updated element-wise by each rule. A matrix owned whole is its owner's; Muon on
-- an element-wise (distopt) or row-sharded (rows) buffer, or an unsharded one, orthogonalises
-- every matrix on every rank (docs/algorithms.md section 8). A buffer of smaller dp (expert_dp)
-- maps rank r to r mod dp.
local function rank_work(layout, steps, split_qkv)
   local ranks = 1
   for _, b in ipairs(layout.buffers) do ranks = math.max(ranks, b.dp) end
   local work = {}
   for r = 1, ranks do
      work[r] = { ns_flops = 0, matrices = 0, orthogonalised = 0, elements = {} }
   end
   -- field: "ns_flops", "matrices", "orthogonalised", or a rule's name (its elements updated)
   local function credit(buffer, owner, field, amount)
      local function add(w)
         local t = w[field] ~= nil and w or w.elements
         t[field] = (t[field] or 0) + amount
      end
      if owner == nil then
         for r = 1, ranks do add(work[r]) end
      else
         for r = owner + 1, ranks, buffer.dp do add(work[r]) end
      end
   end
   for _, p in ipairs(layout.params) do
      local buffer = layout.buffers[p.buffer]
      local field = p.optimizer
      if kinds[p.optimizer].whole then
         -- the library splits a fused QKV weight for Muon's rule only (NorMuon's second moment
         -- is per row already)
         local matrices = costs.muon_matrices(p, split_qkv and p.optimizer == "muon")
         for _, shape in ipairs(matrices) do
            credit(buffer, p.owner, "ns_flops", costs.ns_flops(shape, steps))
         end
         credit(buffer, p.owner, "matrices", #matrices)
         credit(buffer, p.owner, "orthogonalised", numel_of(p.shape))
      end
      if p.owner ~= nil then
         credit(buffer, p.owner, field, numel_of(p.shape))
      elseif buffer.algorithm == "default" then
         credit(buffer, nil, field, numel_of(p.shape))
      end
   end
   -- element-wise (distopt) and row-sharded buffers: every rank updates its slice of each bucket
   for _, buffer in ipairs(layout.buffers) do
      if buffer.algorithm == "distopt" or buffer.algorithm == "rows" then
         local slice = 0
         for _, bucket in ipairs(buffer.buckets) do slice = slice + bucket.shard_size end
         credit(buffer, nil, buffer.key.optimizer, slice)
      end
   end
   return work
end

-- Collectives inside the optimizer, exposed: the all-gather of the Muon gradients that
-- orthogonalising whole matrices on element-wise or row-sharded buffers needs (one per bucket),
-- and legacy's variable-size all-gather of each buffer's owned parameters (blocking, after the
-- step). Returns seconds and bytes sent per rank.
local function optimizer_collectives(layout, machine)
   local seconds, bytes = 0, 0
   for _, buffer in ipairs(layout.buffers) do
      local p = buffer.dp
      if buffer.key.whole and (buffer.algorithm == "distopt" or buffer.algorithm == "rows") then
         local grad_bytes = DTYPE_BYTES[buffer.key.grad_dtype]
         for _, bucket in ipairs(buffer.buckets) do
            local shards = equal_shards((bucket.stop - bucket.start) * grad_bytes, p)
            seconds = seconds + costs.collective_time(machine, "ag", shards)
            bytes = bytes + bytes_sent(shards)
         end
      elseif buffer.algorithm == "legacy" and p > 1 then
         local owned = {}
         for r = 1, p do owned[r] = 0 end
         for _, name in ipairs(buffer.params) do
            local place = layout:place(name)
            if place.owner ~= nil then
               owned[place.owner + 1] = owned[place.owner + 1]
                  + place.numel * DTYPE_BYTES[buffer.key.param_dtype]
            end
         end
         seconds = seconds + costs.collective_time(machine, "ag", owned)
         bytes = bytes + bytes_sent(owned)
      end
   end
   return seconds, bytes
end

-- ---- predict -------------------------------------------------------------------------------

local PREDICT_OPTIONS = { model = true, tokens = true, machine = true, zero = true,
   ns_steps = true, attention = true, bytes_per_element = true, topk = true, muon = true }

-- lw.stepmodel.predict(layout, { tokens = N, machine = "h100-node" | table, model = nil |
-- FLOPs per token | specs, attention = { n_layer, n_embd, seq_len }, zero = 1 | 2 | 3,
-- ns_steps = 5, bytes_per_element = { adamw = 28, muon = 24, lion = 20, normuon = 36 },
-- topk = 2, muon = { variant, row_equilibrate, renormalize, cautious_wd, ns_steps, ... } }): the
-- predicted step;
-- times in seconds. tokens: per rank per step (batch x sequence x micro-steps). topk: experts
-- per token of a mixture of experts, whose experts' forward and backward count at topk over
-- their layer's experts while Newton-Schulz runs on every expert matrix. muon: Muon's options as
-- lw.optim.new takes them (default: the library's), whose rescaling passes (costs.muon_work) every
-- matrix orthogonalised adds, whose ns_steps count when ns_steps is not given, and whose
-- split_qkv (default on) makes a fused QKV weight's Newton-Schulz its Q's, K's and V's.
function predict.predict(layout, opts)
   if type(layout) ~= "table" or type(layout.buffers) ~= "table" or type(layout.params) ~= "table"
   then
      fail("predict needs a layout (lw.layout.compute's result), got %s", type(layout))
   end
   if type(opts) ~= "table" then fail("predict needs options { tokens = ..., machine = ... }") end
   for k in pairs(opts) do
      if not PREDICT_OPTIONS[k] then fail("unknown option '%s'", tostring(k)) end
   end
   local machine = machines.machine(opts.machine or machines.default_machine)
   local tokens = opts.tokens
   if not positive(tokens) then
      fail("tokens (per rank per step) must be a positive number, got %s", tostring(tokens))
   end
   local zero = opts.zero or 1
   if zero ~= 1 and zero ~= 2 and zero ~= 3 then
      fail("zero must be 1, 2 or 3, got %s", tostring(zero))
   end
   local option_bytes, muon_steps, split_qkv = costs.muon_work(opts.muon)
   local steps = opts.ns_steps or (opts.muon ~= nil and muon_steps) or costs.ns_steps
   if not positive(steps) then
      fail("ns_steps must be a positive number, got %s", tostring(steps))
   end
   local per_element = opts.bytes_per_element or costs.bytes_per_element

   -- the model's FLOPs per token, and each parameter's share of them along the passes
   local weights, total_weight = token_weights(layout.params, opts.topk), 0
   for _, w in ipairs(weights) do total_weight = total_weight + w end
   local flops_per_token
   if type(opts.model) == "number" then
      if not non_negative(opts.model) then
         fail("model (FLOPs per token) must be a non-negative number, got %s", tostring(opts.model))
      end
      flops_per_token = opts.model
   elseif type(opts.model) == "table" then
      flops_per_token = costs.flops_per_token(opts.model, opts.attention, opts.topk)
   elseif opts.model == nil then
      flops_per_token = costs.flops_per_token(layout.params, opts.attention, opts.topk)
   else
      fail("model must be FLOPs per token or a list of parameter specs, got %s", type(opts.model))
   end

   -- ranks sharing a node's cores (a CPU machine): rates scale by cores / ranks on the node
   local groups, param_group = make_groups(layout)
   local work = rank_work(layout, steps, split_qkv)
   local ranks = #work
   local on_node = machine.devices_per_node and math.min(ranks, machine.devices_per_node) or ranks
   local share = machine.cores and math.min(1, machine.cores / on_node) or 1
   local model_rate = machine.model_flops * share
   local ns_rate, mem_rate = machine.ns_flops * share, machine.mem_bandwidth * share

   local compute = flops_per_token * tokens / model_rate
   local forward, backward = compute / 3, 2 * compute / 3
   group_collectives(layout, machine, groups)
   local uses = forward_uses(layout, weights)
   local f_end, f_wait = forward_pass(groups, param_group, uses, forward, total_weight)
   local held = {}
   if #uses > 0 then held[param_group[uses[#uses].param]] = true end
   local b_end, b_wait, rs_end = backward_pass(groups, param_group, uses, backward, total_weight,
      zero, held)
   local reduce_exposed = math.max(0, rs_end - b_end)
   local norm = costs.small_allreduce_time(machine, ranks)
   local opt_comm, opt_comm_bytes = optimizer_collectives(layout, machine)

   local slowest, optimizer = 1, -1
   for r, w in ipairs(work) do
      w.ns = w.ns_flops / ns_rate
      local bytes = 0
      for rule, n in pairs(w.elements) do
         local b = per_element[rule]
         if b == nil then
            errors.fail("lw.planner", "bytes_per_element has no figure for the rule '%s'", rule)
         end
         bytes = bytes + n * b
      end
      w.option_bytes = w.orthogonalised * option_bytes
      w.elementwise = (bytes + w.option_bytes) / mem_rate
      w.total = w.ns + w.elementwise
      if w.total > optimizer then slowest, optimizer = r, w.total end
   end

   local buckets, wire = {}, opt_comm_bytes
   for k, g in ipairs(groups) do
      local row = { group = k, buffer = g.buffer, bucket = g.bucket, algorithm = g.algorithm,
         kind = g.kind, optimizer = g.optimizer, expert = g.expert, dp = g.dp, numel = g.numel,
         real = g.real, shard_max = g.shard_max, shard_min = g.shard_min, ready = g.ready,
         rs = { bytes = g.rs.bytes, time = g.rs.time, start = g.rs_start, stop = g.rs_stop } }
      wire = wire + g.rs.bytes
      if g.ag then
         row.ag = { bytes = g.ag.bytes, time = g.ag.time, start = g.ag_start, stop = g.ag_stop }
         wire = wire + g.ag.bytes * (zero == 3 and (g.ag3_start and 2 or 1) or 1)
         if zero == 3 and g.ag3_start then
            row.ag_backward = { start = g.ag3_start, stop = g.ag3_stop }
         end
      end
      buckets[k] = row
   end

   local exposed = { forward = f_wait, backward = b_wait, reduce = reduce_exposed, norm = norm,
      optimizer = opt_comm }
   exposed.total = f_wait + b_wait + reduce_exposed + norm + opt_comm
   return {
      machine = machine, tokens = tokens, zero = zero, flops_per_token = flops_per_token,
      ns_steps = steps, muon_option_bytes = option_bytes, share = share,
      layout = { algorithm = layout.algorithm, dp = layout.dp, expert_dp = layout.expert_dp,
                 bucket_size = layout.bucket_size },
      forward = forward, backward = backward, compute = compute,
      exposed = exposed, optimizer = optimizer, slowest = slowest - 1,
      ranks = work, buckets = buckets, wire_bytes = wire,
      step = f_end + b_end + reduce_exposed + norm + opt_comm + optimizer,
   }
end

-- The algorithms stepmodel.compare lays out by default.
predict.compare_algorithms = { "cost", "lpt", "size_matching", "packed", "distopt", "rows" }

return predict
