-- costs.lua: the planner's cost formulas: a collective's seconds on a machine's tiers, and
-- the model's work (Newton-Schulz FLOPs, optimizer bytes per element, FLOPs per token with
-- attention and experts). It simulates no step; predict.lua does.
local C = require("lwopt.C")
local errors = require("lwopt.errors")

local costs = {}

local fail = errors.failer("lw.stepmodel")

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
function costs.collective_time(machine, op, shards)
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
function costs.small_allreduce_time(machine, p)
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
costs.ns_steps = C.lib.lw_muon_defaults().ns_steps

-- Full-GEMM FLOPs of Newton-Schulz on a matrix of this shape (docs/algorithms.md section 6): per
-- step 4 p^2 q + 2 p^3 for p = min, q = max (X X^T, A A and B X). lwopt's CPU path computes the
-- symmetric products with SYRK / SYMM; the machine's ns_flops is quoted in these full-GEMM FLOPs.
function costs.ns_flops(shape, steps)
   local p, q = math.min(shape[1], shape[2]), math.max(shape[1], shape[2])
   return (steps or costs.ns_steps) * (4 * p * p * q + 2 * p * p * p)
end

-- Bytes each element moves in the element-wise part of each rule's update (fp32 state), by
-- the rule's name: AdamW reads w, g, m, v and writes w, m, v; Lion reads w, g, m and writes w,
-- m; Muon reads g and m, writes m (momentum), reads w and the orthogonalised update and writes
-- w; NorMuon as Muon, and its variance reduction reads the update twice (the lines' squares,
-- then the scaling) and writes it once. A rule the library adds needs its figure here (the
-- planner says so by name).
costs.bytes_per_element = { adamw = 28, muon = 24, lion = 20, normuon = 36 }

-- Bytes per element that Muon's options add to a whole-matrix rule (Muon's or NorMuon's), each
-- a memory-bound pass over every matrix orthogonalised, beside Newton-Schulz's GEMMs (fp32):
-- row equilibration reads U for its row norms, then reads it again and writes the equilibrated
-- copy; renormalisation reads X for its norm, then scales it in place. Cautious weight decay
-- adds no pass: its mask is taken in the step's own pass (reads w and X, writes w, as the plain
-- step). NorMuon's variance reduction is in its bytes_per_element above.
costs.muon_option_bytes = { row_equilibrate = 12, renormalize = 12, cautious_wd = 0 }

-- The Muon options a step runs with: muon is lw.optim.new's muon table (a variant and the keys
-- beside it; nil: the library's defaults), checked as lw.optim.new checks it. Returns the bytes
-- per orthogonalised element its options add (costs.muon_option_bytes), its Newton-Schulz
-- steps and whether it splits a fused QKV weight into Q, K and V (split_qkv).
function costs.muon_work(muon)
   if muon ~= nil and type(muon) ~= "table" then
      fail("muon must be lw.optim.new's muon options (a table), got %s", type(muon))
   end
   -- loaded here: lw.optim needs the library's option structs, the formulas above do not
   local ok, c = pcall(require("lwopt.optim").c_options, { muon = muon })
   if not ok then fail("muon options: %s", (tostring(c):gsub("^lw%.optim%.new: ", ""))) end
   local extra = 0
   for name, bytes in pairs(costs.muon_option_bytes) do
      if c.muon[name] then extra = extra + bytes end
   end
   return extra, c.muon.ns_steps, c.muon.split_qkv
end

-- The matrices Muon orthogonalises for parameter p: with split_qkv a fused QKV weight (p.qkv =
-- { groups = g, rows = { q, k, v } }) is three, Q's g q rows, K's g k and V's g v, each by its
-- columns (as the library splits it); anything else its own shape. A list of shapes.
function costs.muon_matrices(p, split_qkv)
   if not (split_qkv and p.qkv) then return { p.shape } end
   local out = {}
   for c = 1, 3 do out[c] = { p.qkv.groups * p.qkv.rows[c], p.shape[2] } end
   return out
end

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
function costs.attention_flops(n_layer, n_embd, seq_len)
   return 12 * n_layer * n_embd * seq_len
end

-- Experts each token is routed to when the caller does not say: lw.arch.gpt's and lw.nn.MoE's
-- default.
costs.default_topk = 2

-- The share of a step's tokens that pass through each expert parameter of specs, by index
-- (nil for the others): topk over the experts its layer has in specs. A token reaches topk of
-- a layer's n experts, so each expert sees topk / n of the tokens on average; over an EP rank's
-- specs (its n / ep experts only) topk / (n / ep) is the rows each of them gets per token of
-- the rank, the EP group's tokens arriving by the all-to-all. Experts are counted by their
-- names, <layer>experts.<index>.<...>, as lw.nn.MoE names them (lw.models declares them so).
local function expert_shares(specs, topk)
   topk = topk or costs.default_topk
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
function costs.flops_per_token(specs, attention, topk)
   local n = 0
   for _, w in ipairs(token_weights(specs, topk)) do n = n + w end
   local extra = 0
   if attention then
      extra = costs.attention_flops(attention.n_layer, attention.n_embd, attention.seq_len)
   end
   return 6 * n + extra
end

-- ---- the passes ----------------------------------------------------------------------------

-- Bucket groups as lw_buffers forms them: every bucket of every buffer, in the order of its

-- For predict.lua: the helpers its simulation shares with these formulas.
costs.bytes_sent, costs.equal_shards, costs.numel_of = bytes_sent, equal_shards, numel_of
costs.token_weights, costs.DTYPE_BYTES = token_weights, DTYPE_BYTES

return costs
