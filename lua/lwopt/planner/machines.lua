-- machines.lua: the planner's machines: the presets (rates a device achieves, tiers of
-- bandwidth and latency), a CPU machine from measured rates, and lw.stepmodel.machine, which
-- checks a machine table or looks up a preset. Costs and the simulation are elsewhere.
local errors = require("lwopt.errors")

local machines = {}

local fail = errors.failer("lw.stepmodel")

-- An 8-GPU node as NCCL runs it: m gives the description, the rates a device achieves
-- (model_flops, ns_flops, mem_bandwidth) and the bus bandwidths of the two tiers
-- (intra_bandwidth over NVLink, inter_bandwidth over the network). Latencies are NCCL's own
-- cost model (src/graph/tuning.cc, Ring / Simple protocol): 3.4 us per step over NVLink, 9.6 us
-- over the network, 8.4 us per collective. Variable-count collectives run as NCCL would run
-- them: grouped broadcasts / reduces, each a chunked pipeline, so only link load counts
-- (docs/layout.md).
local function nccl_node(m)
   return {
      description = m.description,
      model_flops = m.model_flops, ns_flops = m.ns_flops, mem_bandwidth = m.mem_bandwidth,
      devices_per_node = 8,
      intra = { bandwidth = m.intra_bandwidth, latency = 3.4e-6 },
      inter = { bandwidth = m.inter_bandwidth, latency = 9.6e-6 },
      overhead = 8.4e-6,
      variable = "pipelined",
   }
end

-- Machines. Rates are what a device achieves, not its peak. A tier's `bandwidth` is a bus
-- bandwidth in nccl-tests' sense: the bytes per second each rank sends in a ring reduce-scatter
-- or all-gather (busbw = algbw * (p - 1) / p), so a ring over p ranks moving S bytes takes
-- (p - 1) / p * S / bandwidth; `latency` is the cost of one ring step.
machines.presets = {
   ["h100-node"] = nccl_node{
      description = "8 x H100 SXM per node, NVLink 4, one 400 Gb/s InfiniBand NIC per GPU",
      -- The model's forward + backward in bf16: 400 TFLOP/s per GPU, what Llama 3's
      -- pretraining reached on 16K H100s (38-43% MFU of the 989 TFLOP/s dense bf16 peak; "The
      -- Llama 3 Herd of Models", 2024, table 4). Whole models stay below their GEMMs' rate.
      -- Newton-Schulz: large bf16 GEMMs, about 700 of the 989 TFLOP/s peak (H100 SXM
      -- datasheet; cuBLAS reaches 70-75% of peak on large square products).
      model_flops = 400e12, ns_flops = 700e12,
      -- HBM3: 3.35 TB/s (datasheet); streaming element-wise kernels reach about 90% of it.
      mem_bandwidth = 3.0e12,
      -- NVLink 4: 900 GB/s both ways, 450 GB/s per direction per GPU; NCCL's ring
      -- reduce-scatter and all-gather reach about 80% of that as bus bandwidth on 8 H100s. The
      -- network: one 400 Gb/s (50 GB/s) NDR NIC per GPU, about 90% achieved.
      intra_bandwidth = 360e9, inter_bandwidth = 45e9,
   },
   ["a100-node"] = nccl_node{
      description = "8 x A100 SXM 80GB per node, NVLink 3, one 200 Gb/s InfiniBand NIC per GPU",
      -- 150 TFLOP/s per GPU of the 312 bf16 peak: Megatron-LM reached 138-163 on A100s
      -- (Narayanan et al., SC21, 44-52% of peak); Newton-Schulz's large bf16 GEMMs at about
      -- 80% of the 312 TFLOP/s peak.
      model_flops = 150e12, ns_flops = 250e12,
      -- HBM2e: 2.04 TB/s (A100 80GB SXM datasheet), about 90% reached
      mem_bandwidth = 1.8e12,
      -- NVLink 3: 600 GB/s both ways, 300 GB/s per direction; NCCL's own model caps a ring
      -- on sm_80 at 235 GB/s bus bandwidth (src/graph/tuning.cc). The network, as in a DGX
      -- A100: one 200 Gb/s (25 GB/s) HDR NIC per GPU, about 90% achieved.
      intra_bandwidth = 230e9, inter_bandwidth = 22e9,
   },
   -- The 2-core development machine (bench/layouts.md, "Step-time model"): one BLAS thread per
   -- rank; MPI over shared memory. Rebuild it from figures measured now with
   -- stepmodel.cpu_machine (bench/stepmodel.lua does).
}

-- A CPU machine from measured figures: { sgemm = FLOP/s of one thread on a 1024^3 sgemm,
-- model_efficiency = the share of it the model's kernels reach over forward + backward,
-- ns_ratio = Newton-Schulz's full-GEMM-equivalent rate over sgemm (lwopt's SYRK path does 1/4
-- to 1/3 fewer FLOPs), mem_bandwidth, rs_bandwidth and ag_bandwidth (MPI bus bandwidths),
-- latency (s per ring step), cores (ranks beyond them share the cores) }.
function machines.cpu_machine(m)
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
-- bench/stepmodel.lua (bench/layouts.md, "Step-time model"): sgemm 1024^3 on one thread while
-- the other core runs Newton-Schulz, about 80 GFLOP/s (67-83); Newton-Schulz's
-- full-GEMM-equivalent rate on the small preset's 256-row shapes 1.2x that (95-101 GFLOP/s);
-- the model's kernels at 0.72 of sgemm over forward + backward ("Training throughput":
-- 69-77%); element-wise updates at 4.8 GB/s (AdamW's optimizer time there); reduce-scatter and
-- all-gather bus bandwidths of 16 MB collectives at 2 ranks (0.28-0.35 and 1.8-3.3 GB/s) and
-- their latency per ring step (1.0-2.0 us).
machines.presets["this-machine"] = machines.cpu_machine{
   description = "the 2-core development machine (bench/README.md), MPI over shared memory",
   sgemm = 80e9, model_efficiency = 0.72, ns_ratio = 1.2, mem_bandwidth = 4.8e9,
   rs_bandwidth = 0.32e9, ag_bandwidth = 2.6e9, latency = 1.3e-6, cores = 2,
}

-- The preset names, sorted.
machines.preset_names = {}
for name in pairs(machines.presets) do
   machines.preset_names[#machines.preset_names + 1] = name
end
table.sort(machines.preset_names)

machines.default_machine = "h100-node"

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
machines.variable_models = { "ring", "pipelined" }

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
function machines.machine(m)
   local name
   if type(m) == "string" then
      if machines.presets[m] == nil then
         fail("unknown machine '%s' (one of %s)", m, table.concat(machines.preset_names, ", "))
      end
      name, m = m, machines.presets[m]
   elseif type(m) ~= "table" then
      fail("machine must be a preset name (%s) or a table, got %s",
         table.concat(machines.preset_names, ", "), type(m))
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
         table.concat(machines.variable_models, ", "), tostring(out.variable))
   end
   return out
end

-- For the other planner modules: the checks machines use on numbers.
machines.positive, machines.non_negative = positive, non_negative

return machines
