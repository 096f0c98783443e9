-- stepmodel.lua: lw.stepmodel, a model of one training step's time for a layout: forward and
-- backward at the model's matmul rate; every bucket's reduce-scatter and all-gather on one link,
-- one collective at a time, overlapped with backward and forward in the order lw_buffers issues
-- them; then the optimizer (each rank's Newton-Schulz and element-wise updates) once the
-- gradients are reduced. It predicts and measures nothing; docs/layout.md ("Step-time model")
-- states the equations and what they leave out.
local C = require("lwopt.C")

local stepmodel = {}

local WHERE = "lw.stepmodel"

local function fail(fmt, ...)
   error(WHERE .. ": " .. fmt:format(...), 0)
end

-- Machines. Rates are what a device achieves, not its peak. A tier's `bandwidth` is a bus
-- bandwidth in nccl-tests' sense: the bytes per second each rank sends in a ring reduce-scatter
-- or all-gather (busbw = algbw * (p - 1) / p), so a ring over p ranks moving S bytes takes
-- (p - 1) / p * S / bandwidth; `latency` is the cost of one ring step.
stepmodel.presets = {
   ["h100-node"] = {
      description = "8 x H100 SXM per node, NVLink 4, one 400 Gb/s InfiniBand NIC per GPU",
      -- The model's forward + backward in bf16: 400 TFLOP/s per GPU, what Llama 3's
      -- pretraining reached on 16K H100s (38-43% MFU of the 989 TFLOP/s dense bf16 peak; "The
      -- Llama 3 Herd of Models", 2024, table 4). Whole models stay below their GEMMs' rate.
      model_flops = 400e12,
      -- Newton-Schulz: large bf16 GEMMs, about 700 of the 989 TFLOP/s peak (H100 SXM
      -- datasheet; cuBLAS reaches 70-75% of peak on large square products).
      ns_flops = 700e12,
      -- HBM3: 3.35 TB/s (datasheet); streaming element-wise kernels reach about 90% of it.
      mem_bandwidth = 3.0e12,
      devices_per_node = 8,
      -- NVLink 4: 900 GB/s both ways, 450 GB/s per direction per GPU; NCCL's ring
      -- reduce-scatter and all-gather reach about 80% of that as bus bandwidth on 8 H100s.
      -- Latencies are NCCL's own cost model (src/graph/tuning.cc, Ring / Simple protocol):
      -- 3.4 us per step over NVLink, 9.6 us over the network, 8.4 us per collective.
      intra = { bandwidth = 360e9, latency = 3.4e-6 },
      -- one 400 Gb/s (50 GB/s) NDR NIC per GPU, about 90% achieved
      inter = { bandwidth = 45e9, latency = 9.6e-6 },
      overhead = 8.4e-6,
      -- variable-count collectives as NCCL would run them: grouped broadcasts / reduces, each
      -- a chunked pipeline, so only link load counts (docs/layout.md)
      variable = "pipelined",
   },
   ["a100-node"] = {
      description = "8 x A100 SXM 80GB per node, NVLink 3, one 200 Gb/s InfiniBand NIC per GPU",
      -- 150 TFLOP/s per GPU of the 312 bf16 peak: Megatron-LM reached 138-163 on A100s
      -- (Narayanan et al., SC21, 44-52% of peak).
      model_flops = 150e12,
      -- large bf16 GEMMs at about 80% of the 312 TFLOP/s peak
      ns_flops = 250e12,
      -- HBM2e: 2.04 TB/s (A100 80GB SXM datasheet), about 90% reached
      mem_bandwidth = 1.8e12,
      devices_per_node = 8,
      -- NVLink 3: 600 GB/s both ways, 300 GB/s per direction; NCCL's own model caps a ring
      -- on sm_80 at 235 GB/s bus bandwidth (src/graph/tuning.cc)
      intra = { bandwidth = 230e9, latency = 3.4e-6 },
      -- DGX A100: one 200 Gb/s (25 GB/s) HDR NIC per GPU, about 90% achieved
      inter = { bandwidth = 22e9, latency = 9.6e-6 },
      overhead = 8.4e-6,
      variable = "pipelined",
   },
   -- The 2-core development machine (bench/README.md, "Step-time model"): one BLAS thread per
   -- rank; MPI over shared memory. Rebuild it from figures measured now with
   -- stepmodel.cpu_machine (bench/stepmodel.lua does).
}

-- A CPU machine from measured figures: { sgemm = FLOP/s of one thread on a 1024^3 sgemm,
-- model_efficiency = the share of it the model's kernels reach over forward + backward,
-- ns_ratio = Newton-Schulz's full-GEMM-equivalent rate over sgemm (lwopt's SYRK path does 1/4
-- to 1/3 fewer FLOPs), mem_bandwidth, rs_bandwidth and ag_bandwidth (MPI bus bandwidths),
-- latency (s per ring step), cores (ranks beyond them share the cores) }.
function stepmodel.cpu_machine(m)
   for _, k in ipairs({ "sgemm", "model_efficiency", "ns_ratio", "mem_bandwidth", "rs_bandwidth",
      "ag_bandwidth", "latency" }) do
      if type(m[k]) ~= "number" then fail("cpu_machine: missing number '%s'", k) end
   end
   return {
      description = m.description or "CPU ranks over MPI, one BLAS thread each",
      model_flops = m.sgemm * m.model_efficiency,
      ns_flops = m.sgemm * m.ns_ratio,
      mem_bandwidth = m.mem_bandwidth,
      intra = { bandwidth = math.min(m.rs_bandwidth, m.ag_bandwidth), latency = m.latency,
                rs_bandwidth = m.rs_bandwidth, ag_bandwidth = m.ag_bandwidth },
      overhead = 0,
      variable = "ring",
      cores = m.cores,
   }
end

-- Measured on the development machine (Debian 12, 2 cores of an AMD EPYC), 2026-11-23, by
-- bench/stepmodel.lua (bench/README.md, "Step-time model"): sgemm 1024^3 on one thread while
-- the other core runs Newton-Schulz, about 80 GFLOP/s (67-83); Newton-Schulz's
-- full-GEMM-equivalent rate on the small preset's 256-row shapes 1.2x that (95-101 GFLOP/s);
-- the model's kernels at 0.72 of sgemm over forward + backward ("Training throughput":
-- 69-77%); element-wise updates at 4.8 GB/s (AdamW's optimizer time there); reduce-scatter and
-- all-gather bus bandwidths of 16 MB collectives at 2 ranks (0.28-0.35 and 1.8-3.3 GB/s) and
-- their latency per ring step (1.0-2.0 us).
stepmodel.presets["this-machine"] = stepmodel.cpu_machine{
   description = "the 2-core development machine (bench/README.md), MPI over shared memory",
   sgemm = 80e9, model_efficiency = 0.72, ns_ratio = 1.2, mem_bandwidth = 4.8e9,
   rs_bandwidth = 0.32e9, ag_bandwidth = 2.6e9, latency = 1.3e-6, cores = 2,
}

-- The preset names, sorted.
stepmodel.preset_names = {}
for name in pairs(stepmodel.presets) do
   stepmodel.preset_names[#stepmodel.preset_names + 1] = name
end
table.sort(stepmodel.preset_names)

stepmodel.default_machine = "h100-node"

local MACHINE_FIELDS = {
   { "model_flops", "FLOP/s per device for the model's forward and backward" },
   { "ns_flops", "FLOP/s per device for Newton-Schulz, counted as full GEMMs" },
   { "mem_bandwidth", "bytes/s per device for the element-wise optimizer updates" },
   { "intra", "the link inside a node: { bandwidth = bytes/s, latency = s }" },
}
local MACHINE_OPTIONAL = { name = true, description = true, inter = true, devices_per_node = true,
   overhead = true, variable = true, cores = true }
local TIER_FIELDS = {
   { "bandwidth", "bus bandwidth in bytes/s per rank" },
   { "latency", "seconds per ring step" },
}
local TIER_OPTIONAL = { rs_bandwidth = true, ag_bandwidth = true }
stepmodel.variable_models = { "ring", "pipelined" }

local function positive(v) return type(v) == "number" and v > 0 and v < math.huge end
local function non_negative(v) return type(v) == "number" and v >= 0 and v < math.huge end

local function check_tier(who, path, t)
   if type(t) ~= "table" then
      fail("machine '%s': %s must be a table { bandwidth = bytes/s, latency = s }, got %s", who,
         path, type(t))
   end
   for _, f in ipairs(TIER_FIELDS) do
      if t[f[1]] == nil then
         fail("machine '%s' is missing field '%s.%s' (%s)", who, path, f[1], f[2])
      end
   end
   for k, v in pairs(t) do
      if k ~= "bandwidth" and k ~= "latency" and not TIER_OPTIONAL[k] then
         fail("machine '%s' has unknown field '%s.%s'", who, path, tostring(k))
      end
      local ok = k == "latency" and non_negative(v) or (k ~= "latency" and positive(v))
      if not ok then
         fail("machine '%s': %s.%s must be a %s number, got %s", who, path, k,
            k == "latency" and "non-negative" or "positive", tostring(v))
      end
   end
   return { bandwidth = t.bandwidth, latency = t.latency, rs_bandwidth = t.rs_bandwidth,
            ag_bandwidth = t.ag_bandwidth }
end

-- The machine a preset name or a table describes, checked and completed (a copy): fields
-- model_flops, ns_flops, mem_bandwidth, intra = { bandwidth, latency [, rs_bandwidth,
-- ag_bandwidth] }; optional inter (same shape; needs devices_per_node), overhead (s per
-- collective, 0), variable ("ring" or "pipelined", "ring"), cores (ranks on a node beyond it
-- share the cores: compute and memory rates scale by cores / ranks), name, description.
function stepmodel.machine(m)
   local name
   if type(m) == "string" then
      if stepmodel.presets[m] == nil then
         fail("unknown machine '%s' (one of %s)", m, table.concat(stepmodel.preset_names, ", "))
      end
      name, m = m, stepmodel.presets[m]
   elseif type(m) ~= "table" then
      fail("machine must be a preset name (%s) or a table, got %s",
         table.concat(stepmodel.preset_names, ", "), type(m))
   end
   name = name or m.name or "custom"
   for _, f in ipairs(MACHINE_FIELDS) do
      if m[f[1]] == nil then fail("machine '%s' is missing field '%s' (%s)", name, f[1], f[2]) end
   end
   local known = {}
   for _, f in ipairs(MACHINE_FIELDS) do known[f[1]] = true end
   for k in pairs(m) do
      if not known[k] and not MACHINE_OPTIONAL[k] then
         fail("machine '%s' has unknown field '%s'", name, tostring(k))
      end
   end
   for _, k in ipairs({ "model_flops", "ns_flops", "mem_bandwidth" }) do
      if not positive(m[k]) then
         fail("machine '%s': %s must be a positive number, got %s", name, k, tostring(m[k]))
      end
   end
   local out = { name = name, description = m.description or "", model_flops = m.model_flops,
      ns_flops = m.ns_flops, mem_bandwidth = m.mem_bandwidth,
      intra = check_tier(name, "intra", m.intra), overhead = m.overhead or 0,
      variable = m.variable or "ring", devices_per_node = m.devices_per_node, cores = m.cores }
   if m.inter ~= nil then
      out.inter = check_tier(name, "inter", m.inter)
      if m.devices_per_node == nil then
         fail("machine '%s' is missing field 'devices_per_node' (devices per node, needed with "
            .. "'inter')", name)
      end
   end
   if out.devices_per_node ~= nil and not (positive(out.devices_per_node)
      and out.devices_per_node == math.floor(out.devices_per_node)) then
      fail("machine '%s': devices_per_node must be a positive integer, got %s", name,
         tostring(out.devices_per_node))
   end
   if out.cores ~= nil and not positive(out.cores) then
      fail("machine '%s': cores must be a positive number, got %s", name, tostring(out.cores))
   end
   if not non_negative(out.overhead) then
      fail("machine '%s': overhead must be a non-negative number, got %s", name,
         tostring(out.overhead))
   end
   if out.variable ~= "ring" and out.variable ~= "pipelined" then
      fail("machine '%s': variable must be one of %s, got '%s'", name,
         table.concat(stepmodel.variable_models, ", "), tostring(out.variable))
   end
   return out
end

-- ---- collectives ---------------------------------------------------------------------------

-- Seconds of one tier's reduce-scatter or all-gather among #blocks ranks, rank i's shard
-- `blocks[i]` bytes, at bus bandwidth beta and alpha seconds per ring step. Equal shards: the
-- ring's (p - 1) alpha + (p - 1) / p * S / beta. Unequal shards (packed): "ring" runs p - 1
-- lock-step steps, each as long as the largest shard, (p - 1) max / beta; "pipelined" (chunked:
-- grouped broadcasts or reductions) is bound by the busiest rank, which sends every shard but
-- its own, (S - min) / beta.
local function stage_time(blocks, beta, alpha, variable)
   local p = #blocks
   if p <= 1 then return 0 end
   local total, hi, lo = 0, 0, math.huge
   for i = 1, p do
      local c = blocks[i]
      total, hi, lo = total + c, math.max(hi, c), math.min(lo, c)
   end
   local bytes = variable == "ring" and (p - 1) * hi or total - lo
   return (p - 1) * alpha + bytes / beta
end

local function bandwidth(tier, op)
   return (op == "rs" and tier.rs_bandwidth) or (op == "ag" and tier.ag_bandwidth)
      or tier.bandwidth
end

-- Seconds of a reduce-scatter (op "rs") or all-gather ("ag") whose rank r holds shards[r + 1]
-- bytes (ranks node-major: rank = node * devices_per_node + local). Inside one node: one ring.
-- Across nodes, two stages (a reduce-scatter in this order, an all-gather the other way round,
-- in the same time): inside every node, among its devices_per_node ranks, local rank l's share
-- being every node's shard of local rank l; then across the nodes, node k's share being the sum
-- of its ranks' shards, its traffic spread over the node's devices_per_node NICs (multi-rail, as
-- NCCL routes a node's inter-node traffic through all its NICs), so at devices_per_node x the
-- inter-node bandwidth. With equal shards that is the usual hierarchical ring: (g - 1) alpha1 +
-- (g - 1) / g * S / beta1 + (n - 1) alpha2 + (n - 1) / n * S / (g * beta2). A partly filled last
-- node counts as ranks with empty shards.
function stepmodel.collective_time(machine, op, shards)
   local p = #shards
   if p <= 1 then return 0 end
   local g, intra, inter = machine.devices_per_node, machine.intra, machine.inter
   if inter == nil or g == nil or p <= g then
      return machine.overhead + stage_time(shards, bandwidth(intra, op), intra.latency,
         machine.variable)
   end
   local nodes = math.ceil(p / g)
   local blocks, node = {}, {}
   for l = 1, g do blocks[l] = 0 end
   for k = 1, nodes do
      node[k] = 0
      for l = 1, g do
         local c = shards[(k - 1) * g + l] or 0
         blocks[l], node[k] = blocks[l] + c, node[k] + c
      end
   end
   return machine.overhead
      + stage_time(blocks, bandwidth(intra, op), intra.latency, machine.variable)
      + stage_time(node, g * bandwidth(inter, op), inter.latency, machine.variable)
end

-- The most bytes one rank sends in a reduce-scatter or all-gather of these shards: every shard
-- but its own (hierarchical or not).
local function bytes_sent(shards)
   if #shards <= 1 then return 0 end
   local total, lo = 0, math.huge
   for _, c in ipairs(shards) do total, lo = total + c, math.min(lo, c) end
   return total - lo
end

local function equal_shards(bytes, p)
   local shards = {}
   for r = 1, p do shards[r] = bytes / p end
   return shards
end

-- Seconds of a small all-reduce (the gradient norm): a tree, 2 log2(p) latencies, split over the
-- tiers like the collectives above.
function stepmodel.small_allreduce_time(machine, p)
   if p <= 1 then return 0 end
   local g = machine.devices_per_node
   local log2 = function(x) return math.ceil(math.log(x) / math.log(2) - 1e-9) end
   if machine.inter and g and p > g then
      return machine.overhead + 2 * (log2(g) * machine.intra.latency
         + log2(math.ceil(p / g)) * machine.inter.latency)
   end
   return machine.overhead + 2 * log2(p) * machine.intra.latency
end

-- ---- the model's work ----------------------------------------------------------------------

-- Newton-Schulz steps per matrix: the library's default (lw_muon_defaults, 5).
stepmodel.ns_steps = C.lib.lw_muon_defaults().ns_steps

-- Full-GEMM FLOPs of Newton-Schulz on a matrix of this shape (docs/algorithms.md section 6): per
-- step 4 p^2 q + 2 p^3 for p = min, q = max (X X^T, A A and B X). lwopt's CPU path computes the
-- symmetric products with SYRK / SYMM; the machine's ns_flops is quoted in these full-GEMM FLOPs.
function stepmodel.ns_flops(shape, steps)
   local p, q = math.min(shape[1], shape[2]), math.max(shape[1], shape[2])
   return (steps or stepmodel.ns_steps) * (4 * p * p * q + 2 * p * p * p)
end

-- Bytes each element moves in the element-wise optimizer updates (fp32 state): AdamW reads w,
-- g, m, v and writes w, m, v; Muon reads g and m, writes m (momentum), reads w and the
-- orthogonalised update and writes w.
stepmodel.bytes_per_element = { adamw = 28, muon = 24 }

local DTYPE_BYTES = { f32 = 4, bf16 = 2, f16 = 2, f64 = 8, i64 = 8 }

local function numel_of(shape)
   local n = 1
   for _, d in ipairs(shape) do n = n * d end
   return n
end

-- A parameter's share of the model's matmul FLOPs: its numel for the matrices (linear layers,
-- experts, the LM head; a shared embedding as the LM head); none for embedding lookups, norms
-- and biases. A spec without a role counts when it is 2-D.
local function matmul_weight(p)
   if p.shared_embedding then return numel_of(p.shape) end
   local role = p.role
   if role == "matrix" or role == "expert" or role == "output" then return numel_of(p.shape) end
   if role == nil and #p.shape == 2 then return numel_of(p.shape) end
   return 0
end

-- Forward + backward FLOPs per token of attention's two products over the whole t x t square
-- (PaLM's and nanoGPT's estimate, the causal mask not subtracted): 12 * n_layer * n_embd * seq.
function stepmodel.attention_flops(n_layer, n_embd, seq_len)
   return 12 * n_layer * n_embd * seq_len
end

-- Experts each token is routed to when the caller does not say: lw.arch.gpt's and lw.nn.MoE's
-- default.
stepmodel.default_topk = 2

-- The share of a step's tokens that pass through each expert parameter of specs, by index
-- (nil for the others): topk over the experts its layer has in specs. A token reaches topk of
-- a layer's n experts, so each expert sees topk / n of the tokens on average; over an EP rank's
-- specs (its n / ep experts only) topk / (n / ep) is the rows each of them gets per token of
-- the rank, the EP group's tokens arriving by the all-to-all. Experts are counted by their
-- names, <layer>experts.<index>.<...>, as lw.arch and lw.nn.MoE name them.
local function expert_shares(specs, topk)
   topk = topk or stepmodel.default_topk
   if not (type(topk) == "number" and topk >= 1 and topk < math.huge) then
      fail("topk (experts per token) must be a number >= 1, got %s", tostring(topk))
   end
   local experts, layer_of = {}, {}
   for i, s in ipairs(specs) do
      if s.expert == true or s.role == "expert" then
         local layer, index = s.name:match("^(.-)experts%.(%d+)%.")
         if layer == nil then
            fail("expert parameter '%s' is not named <layer>experts.<index>.<name>: the model "
               .. "counts a layer's experts by their names", s.name)
         end
         local set = experts[layer] or { n = 0 }
         experts[layer] = set
         if not set[index] then set[index], set.n = true, set.n + 1 end
         layer_of[i] = layer
      end
   end
   local shares = {}
   for i, layer in pairs(layer_of) do shares[i] = topk / experts[layer].n end
   return shares
end

-- Each spec's share of the model's matmul FLOPs per token: matmul_weight, an expert's times the
-- share of the tokens it sees (expert_shares).
local function token_weights(specs, topk)
   local shares, weights = expert_shares(specs, topk), {}
   for i, s in ipairs(specs) do weights[i] = matmul_weight(s) * (shares[i] or 1) end
   return weights
end

-- Forward + backward FLOPs per token of specs: 6 per matmul weight (2 forward, 4 backward); an
-- expert's at the share of the tokens it sees, topk (default 2) over its layer's experts, since
-- only topk of them run on each token (the router runs on every token, as a dense matrix).
function stepmodel.flops_per_token(specs, attention, topk)
   local n = 0
   for _, w in ipairs(token_weights(specs, topk)) do n = n + w end
   local extra = 0
   if attention then
      extra = stepmodel.attention_flops(attention.n_layer, attention.n_embd, attention.seq_len)
   end
   return 6 * n + extra
end

-- ---- the passes ----------------------------------------------------------------------------

-- Bucket groups as lw_buffers forms them: every bucket of every buffer, in the order of its
-- first-defined parameter (forward order); param_group[i] is parameter i's group.
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
      g.algorithm, g.muon, g.expert = buffer.algorithm, buffer.key.muon, buffer.key.expert
      g.numel, g.real, g.dp = size, bucket.numel_unpadded, p
      if buffer.algorithm == "default" or buffer.algorithm == "legacy" then
         -- unsharded: the gradients are all-reduced (a ring: reduce-scatter + all-gather)
         local shards = equal_shards(size * grad_bytes, p)
         g.kind = "all-reduce"
         g.rs = { bytes = 2 * bytes_sent(shards),
                  time = stepmodel.collective_time(machine, "rs", shards)
                     + stepmodel.collective_time(machine, "ag", shards) }
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
                  time = stepmodel.collective_time(machine, "rs", grads) }
         g.ag = { bytes = bytes_sent(params),
                  time = stepmodel.collective_time(machine, "ag", params) }
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

-- Forward: lw_buffers starts the all-gather of group 1 when the optimizer step ends (time 0);
-- the pre-hook of a group's first use waits for its gather (and any before it) and starts the
-- next group's. Returns the forward's end (compute plus waits) and sets each group's ag_start,
-- ag_stop. Groups without an all-gather (unsharded) never wait.
local function forward_pass(groups, param_group, uses, seconds, total_weight)
   local link, t, waited = new_link(), 0, 0
   local issued, done = 0, 0
   local function issue(k)
      local g = groups[k]
      if g.ag then
         g.ag_start, g.ag_stop = run_on(link, t, g.ag.time)
      else
         g.ag_start, g.ag_stop = t, t
      end
      issued = k
   end
   if #groups > 0 then issue(1) end
   for _, u in ipairs(uses) do
      local k = param_group[u.param]
      if k > done then
         for j = done + 1, k do
            if j > issued then issue(j) end
            if groups[j].ag_stop > t then
               waited = waited + groups[j].ag_stop - t
               t = groups[j].ag_stop
            end
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
      if g.ag then
         g.ag3_start, g.ag3_stop = run_on(link, t, g.ag.time)
      else
         g.ag3_start, g.ag3_stop = t, t
      end
   end
   for n = #uses, 1, -1 do
      local u = uses[n]
      local k = param_group[u.param]
      if zero == 3 and not started[k] then
         started[k] = true
         if not held[k] then
            if groups[k].ag3_stop == nil then gather(k) end
            if groups[k].ag3_stop > t then
               waited = waited + groups[k].ag3_stop - t
               t = groups[k].ag3_stop
            end
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

-- Per rank (1-based: rank r at r + 1, over the largest buffer dp): Newton-Schulz FLOPs and
-- matrices, and the elements updated element-wise by Muon and by AdamW. A matrix owned whole
-- is its owner's; Muon on an element-wise (distopt) or row-sharded (rows) buffer, or an
-- unsharded one, orthogonalises every matrix on every rank (docs/algorithms.md section 8). A
-- buffer of smaller dp (expert_dp) maps rank r to r mod dp.
local function rank_work(layout, steps)
   local ranks = 1
   for _, b in ipairs(layout.buffers) do ranks = math.max(ranks, b.dp) end
   local work = {}
   for r = 1, ranks do work[r] = { ns_flops = 0, matrices = 0, muon = 0, adamw = 0 } end
   local function credit(buffer, owner, field, amount)
      if owner == nil then
         for r = 1, ranks do work[r][field] = work[r][field] + amount end
      else
         for r = owner + 1, ranks, buffer.dp do work[r][field] = work[r][field] + amount end
      end
   end
   for _, p in ipairs(layout.params) do
      local buffer = layout.buffers[p.buffer]
      local muon = p.optimizer == "muon"
      local field = muon and "muon" or "adamw"
      if muon then
         credit(buffer, p.owner, "ns_flops", stepmodel.ns_flops(p.shape, steps))
         credit(buffer, p.owner, "matrices", 1)
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
         credit(buffer, nil, buffer.key.muon and "muon" or "adamw", slice)
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
      if buffer.key.muon and (buffer.algorithm == "distopt" or buffer.algorithm == "rows") then
         local grad_bytes = DTYPE_BYTES[buffer.key.grad_dtype]
         for _, bucket in ipairs(buffer.buckets) do
            local shards = equal_shards((bucket.stop - bucket.start) * grad_bytes, p)
            seconds = seconds + stepmodel.collective_time(machine, "ag", shards)
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
         seconds = seconds + stepmodel.collective_time(machine, "ag", owned)
         bytes = bytes + bytes_sent(owned)
      end
   end
   return seconds, bytes
end

-- ---- predict -------------------------------------------------------------------------------

local PREDICT_OPTIONS = { model = true, tokens = true, machine = true, zero = true,
   ns_steps = true, attention = true, bytes_per_element = true, topk = true }

-- lw.stepmodel.predict(layout, { tokens = N, machine = "h100-node" | table, model = nil |
-- FLOPs per token | specs, attention = { n_layer, n_embd, seq_len }, zero = 1 | 2 | 3,
-- ns_steps = 5, bytes_per_element = { adamw = 28, muon = 24 }, topk = 2 }): the predicted step;
-- times in seconds. tokens: per rank per step (batch x sequence x micro-steps). topk: experts
-- per token of a mixture of experts, whose experts' forward and backward count at topk over
-- their layer's experts while Newton-Schulz runs on every expert matrix.
function stepmodel.predict(layout, opts)
   if type(layout) ~= "table" or type(layout.buffers) ~= "table" or type(layout.params) ~= "table"
   then
      fail("predict needs a layout (lw.layout.compute's result), got %s", type(layout))
   end
   if type(opts) ~= "table" then fail("predict needs options { tokens = ..., machine = ... }") end
   for k in pairs(opts) do
      if not PREDICT_OPTIONS[k] then fail("unknown option '%s'", tostring(k)) end
   end
   local machine = stepmodel.machine(opts.machine or stepmodel.default_machine)
   local tokens = opts.tokens
   if not positive(tokens) then
      fail("tokens (per rank per step) must be a positive number, got %s", tostring(tokens))
   end
   local zero = opts.zero or 1
   if zero ~= 1 and zero ~= 2 and zero ~= 3 then
      fail("zero must be 1, 2 or 3, got %s", tostring(zero))
   end
   local steps = opts.ns_steps or stepmodel.ns_steps
   if not positive(steps) then
      fail("ns_steps must be a positive number, got %s", tostring(steps))
   end
   local per_element = opts.bytes_per_element or stepmodel.bytes_per_element

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
      flops_per_token = stepmodel.flops_per_token(opts.model, opts.attention, opts.topk)
   elseif opts.model == nil then
      flops_per_token = stepmodel.flops_per_token(layout.params, opts.attention, opts.topk)
   else
      fail("model must be FLOPs per token or a list of parameter specs, got %s", type(opts.model))
   end

   -- ranks sharing a node's cores (a CPU machine): rates scale by cores / ranks on the node
   local groups, param_group = make_groups(layout)
   local work = rank_work(layout, steps)
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
   local norm = stepmodel.small_allreduce_time(machine, ranks)
   local opt_comm, opt_comm_bytes = optimizer_collectives(layout, machine)

   local slowest, optimizer = 1, -1
   for r, w in ipairs(work) do
      w.ns = w.ns_flops / ns_rate
      w.elementwise = (w.muon * per_element.muon + w.adamw * per_element.adamw) / mem_rate
      w.total = w.ns + w.elementwise
      if w.total > optimizer then slowest, optimizer = r, w.total end
   end

   local buckets, wire = {}, opt_comm_bytes
   for k, g in ipairs(groups) do
      local row = { group = k, buffer = g.buffer, bucket = g.bucket, algorithm = g.algorithm,
         kind = g.kind, muon = g.muon, expert = g.expert, dp = g.dp, numel = g.numel,
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
      ns_steps = steps, share = share,
      layout = { algorithm = layout.algorithm, dp = layout.dp, expert_dp = layout.expert_dp,
                 bucket_size = layout.bucket_size },
      forward = forward, backward = backward, compute = compute,
      exposed = exposed, optimizer = optimizer, slowest = slowest - 1,
      ranks = work, buckets = buckets, wire_bytes = wire,
      step = f_end + b_end + reduce_exposed + norm + opt_comm + optimizer,
   }
end

-- The algorithms stepmodel.compare lays out by default.
stepmodel.compare_algorithms = { "cost", "lpt", "size_matching", "packed", "distopt", "rows" }

-- The printable tables (lwopt/stepmodel_show.lua): loaded on first use.
function stepmodel.table(...) return require("lwopt.stepmodel_show").table(...) end
function stepmodel.compare(...) return require("lwopt.stepmodel_show").compare(...) end
function stepmodel.compare_table(...) return require("lwopt.stepmodel_show").compare_table(...) end

return stepmodel
