-- optim.lua: lw.optim.new, the optimizer over lw.ddp buffers (src/core/optimizer.c): Muon on
-- the matrices each rank owns, AdamW on its elements, options named as in docs/algorithms.md
-- sections 6-7. Parameters fall into hyper-parameter groups by (optimizer, lr, weight decay),
-- taken from the routing rule's opts, the optimizer's options, and the defaults. Under tensor
-- parallelism (section 9) tp_comm is the rank's TP group and muon.tp_mode / muon.split_qkv say
-- how Muon treats the TP shards and the fused QKV weights (the specs' tp and qkv fields).
local ffi = require("ffi")
local C = require("lwopt.C")
local comm_mod = require("lwopt.comm")
local errors = require("lwopt.errors")

local lib = C.lib
local optim = {}

local Optimizer = {}
Optimizer.__index = Optimizer

local WHERE = "lw.optim.new"

local fail = errors.failer(WHERE)

-- The named coefficient sets, from C (lw_ns_coeffs_name) but "custom": a list of {a, b, c}
-- stands for that one.
local coefficient_sets = {}
for _, name in ipairs(C.names("ns_coeffs")) do
   if C.value("ns_coeffs", name) ~= lib.LW_NS_CUSTOM then
      coefficient_sets[#coefficient_sets + 1] = name
   end
end

-- The value of name in enum kind when it is one of names (a list of that enum's names), else
-- the message "unknown <option> 'name' (<names>...)".
local function choice(kind, name, names, option, tail)
   for _, known in ipairs(names) do
      if name == known then return C.value(kind, name) end
   end
   fail("unknown %s '%s' (%s%s)", option, tostring(name), table.concat(names, ", "), tail or "")
end

local function check_keys(t, allowed, where)
   if t == nil then return {} end
   if type(t) ~= "table" then fail("%s must be a table", where) end
   for k in pairs(t) do
      if not allowed[k] then fail("unknown option '%s%s'", where == "" and "" or where .. ".", tostring(k)) end
   end
   return t
end

local function set(list)
   local s = {}
   for _, k in ipairs(list) do s[k] = true end
   return s
end

local TOP = set{ "mode", "lr", "weight_decay", "clip", "muon", "adamw", "tp_comm" }
local MUON = set{ "lr", "weight_decay", "momentum", "nesterov", "ns_steps", "coefficients",
   "coefficients_repeat", "weight_decay_mode", "scale", "extra_scale", "eps", "symmetric",
   "precision", "tp_mode", "split_qkv" }
local ADAMW = set{ "lr", "weight_decay", "beta1", "beta2", "eps" }

local function pick(value, default) if value == nil then return default end return value end

-- The type each numeric or boolean option must have (ranges are checked by the C library,
-- which names the value); the others (mode, coefficients, weight_decay_mode, scale) are checked
-- where they are read.
local TYPES = {
   lr = "number", weight_decay = "number", clip = "number", momentum = "number",
   ns_steps = "integer", extra_scale = "number", eps = "number", beta1 = "number",
   beta2 = "number", nesterov = "boolean", symmetric = "boolean", coefficients_repeat = "boolean",
   split_qkv = "boolean",
}

-- Checks the types of an option table's values (where: "", "muon" or "adamw").
local function check_types(t, where)
   for k, v in pairs(t) do
      local kind = TYPES[k]
      local name = (where == "" and "" or where .. ".") .. k
      local shown = type(v) == "string" and ("'" .. v .. "'") or tostring(v)
      if kind == "boolean" and type(v) ~= "boolean" then
         fail("%s must be true or false, got %s", name, shown)
      elseif (kind == "number" or kind == "integer") and (type(v) ~= "number" or v ~= v
         or math.abs(v) == math.huge or (kind == "integer" and v ~= math.floor(v))) then
         fail("%s must be a finite %s, got %s", name, kind, shown)
      end
   end
end

-- The C options, and a keep-alive for the custom coefficient array.
local function c_options(o, m, a)
   local c = lib.lw_optimizer_defaults()
   local keep
   c.clip = o.clip or 0
   c.muon.momentum = pick(m.momentum, c.muon.momentum)
   c.muon.nesterov = pick(m.nesterov, true)
   c.muon.ns_steps = pick(m.ns_steps, c.muon.ns_steps)
   local coeffs = pick(m.coefficients, C.name("ns_coeffs", c.muon.coeffs))
   if type(coeffs) == "string" then
      c.muon.coeffs = choice("ns_coeffs", coeffs, coefficient_sets, "muon.coefficients",
         ", or a list of {a, b, c}")
   elseif type(coeffs) == "table" then
      if #coeffs == 0 then fail("muon.coefficients is an empty list") end
      keep = ffi.new("float[?]", 3 * #coeffs)
      for i, abc in ipairs(coeffs) do
         if type(abc) ~= "table" or #abc ~= 3 then
            fail("muon.coefficients[%d] must be {a, b, c}", i)
         end
         for j = 1, 3 do
            if type(abc[j]) ~= "number" then fail("muon.coefficients[%d][%d] is not a number", i, j) end
            keep[3 * (i - 1) + j - 1] = abc[j]
         end
      end
      c.muon.coeffs = lib.LW_NS_CUSTOM
      c.muon.custom = keep
      c.muon.n_custom = #coeffs
      c.muon.custom_repeat = m.coefficients_repeat == true
   else
      fail("muon.coefficients must be a name or a list of {a, b, c}")
   end
   c.muon.weight_decay_mode = choice("weight_decay",
      pick(m.weight_decay_mode, C.name("weight_decay", c.muon.weight_decay_mode)),
      C.names("weight_decay"), "muon.weight_decay_mode")
   c.muon.scale = choice("muon_scale", pick(m.scale, C.name("muon_scale", c.muon.scale)),
      C.names("muon_scale"), "muon.scale")
   c.muon.extra_scale = pick(m.extra_scale, 1)
   c.muon.eps = pick(m.eps, c.muon.eps)
   c.muon.symmetric = pick(m.symmetric, true)
   c.muon.precision = choice("ns_precision",
      pick(m.precision, C.name("ns_precision", c.muon.precision)), C.names("ns_precision"),
      "muon.precision")
   c.muon.tp_mode = choice("muon_tp_mode",
      pick(m.tp_mode, C.name("muon_tp_mode", c.muon.tp_mode)), C.names("muon_tp_mode"),
      "muon.tp_mode")
   c.muon.split_qkv = pick(m.split_qkv, c.muon.split_qkv)
   c.adamw.beta1 = pick(a.beta1, c.adamw.beta1)
   c.adamw.beta2 = pick(a.beta2, c.adamw.beta2)
   c.adamw.eps = pick(a.eps, c.adamw.eps)
   return c, keep
end

-- AdamW decays matrices, not gains, biases or embeddings (docs/algorithms.md section 7).
local function adamw_decays(spec)
   return #spec.shape == 2 and spec.role ~= "embedding" and not spec.shared_embedding
end

local function group_of(spec, o, m, a)
   local rule = spec.opts or {}
   local lr, wd
   if spec.optimizer == "muon" then
      lr = pick(rule.lr, pick(m.lr, pick(o.lr, 1e-3)))
      wd = pick(rule.weight_decay, pick(m.weight_decay, pick(o.weight_decay, 0.1)))
   else
      lr = pick(rule.lr, pick(a.lr, pick(o.lr, 1e-3)))
      local default_wd = adamw_decays(spec) and pick(a.weight_decay, pick(o.weight_decay, 0.1)) or 0
      wd = pick(rule.weight_decay, default_wd)
   end
   return spec.optimizer, lr, wd
end

-- The TP group as the C optimizer takes it: tp itself when it moves the buffers' memory (or
-- under blockwise, which has no collectives), else a device communicator over it (collective).
local function tp_for(tp, d, mode)
   if tp == nil then return nil end
   if type(tp) ~= "table" or tp._c == nil then
      fail("tp_comm must be a communicator (lw.comm), got %s", type(tp))
   end
   if tp.size == 1 or mode == lib.LW_MUON_TP_BLOCKWISE or tp:reaches(d.device) then return tp end
   return comm_mod.device(tp, d.device)
end

-- lw.optim.new(ddp, opts): opts = { mode, lr, weight_decay, clip, tp_comm, muon = { lr,
-- weight_decay, momentum, nesterov, ns_steps, coefficients, coefficients_repeat,
-- weight_decay_mode, scale, extra_scale, eps, symmetric, precision, tp_mode, split_qkv },
-- adamw = { lr, weight_decay, beta1, beta2, eps } }. tp_comm: this rank's tensor-parallel group
-- (an lw.comm: its ranks hold the shards of the same tensors, with ddp's built from the same
-- local specs on each); nil: no TP. muon.tp_mode: "duplicated" (default), "distributed" or
-- "blockwise"; muon.split_qkv (default true): Q, K and V of a fused QKV weight orthogonalised
-- apart.
function optim.new(d, opts)
   local o = check_keys(opts, TOP, "")
   local m, a = check_keys(o.muon, MUON, "muon"), check_keys(o.adamw, ADAMW, "adamw")
   check_types(o, "")
   check_types(m, "muon")
   check_types(a, "adamw")
   if o.mode ~= nil and o.mode ~= d.mode then
      fail("mode '%s' does not match the buffers, which were made for mode '%s'", tostring(o.mode),
         d.mode)
   end
   local c, keep = c_options(o, m, a)
   local tp = tp_for(o.tp_comm, d, c.muon.tp_mode)
   c.tp_comm = tp and tp._c or nil
   local out = ffi.new("lw_optimizer*[1]")
   C.check(lib.lw_optimizer_new(d._c, c, out), WHERE)
   local self = setmetatable({ ddp = d, mode = d.mode, groups = {}, _keep = keep,
      _lr_scale = 1, tp_comm = o.tp_comm, _tp = tp }, Optimizer)
   self._c = ffi.gc(out[0], lib.lw_optimizer_free)
   local by_key = {}
   for i, spec in ipairs(d.specs) do
      local kind, lr, wd = group_of(spec, o, m, a)
      local key = kind .. "|" .. lr .. "|" .. wd
      local g = by_key[key]
      if g == nil then
         g = { optimizer = kind, lr = lr, weight_decay = wd, params = {} }
         self.groups[#self.groups + 1] = g
         g.index = #self.groups - 1
         by_key[key] = g
      end
      g.params[#g.params + 1] = spec.name
      C.check(lib.lw_optimizer_set_group(self._c, i - 1, g.index), WHERE)
   end
   self:_send_hparams(WHERE)
   return self
end

function Optimizer:_send_hparams(where)
   for _, g in ipairs(self.groups) do
      C.check(lib.lw_optimizer_set_hparams(self._c, g.index, g.lr * self._lr_scale,
         g.weight_decay), where)
   end
end

-- Sets a group's lr and weight decay (groups[i], 1-based) for the following steps.
function Optimizer:set_group(i, lr, weight_decay)
   local g = self.groups[i]
   if g == nil then errors.misuse("optimizer:set_group", "no group %s", tostring(i)) end
   g.lr = lr or g.lr
   g.weight_decay = weight_decay or g.weight_decay
   self:_send_hparams("optimizer:set_group")
end

-- Bytes of optimizer state this rank holds (Muon momentum, AdamW moments).
-- Bytes of optimizer state this rank holds (Muon momentum, AdamW m and v), and of its fp32
-- master weights (bf16 parameters; 0 for fp32), as two numbers.
function Optimizer:state_bytes()
   if self._state_bytes == nil then
      local entry, total, master = ffi.new("lw_state_entry"), 0, 0
      for k = 0, lib.lw_optimizer_state_count(self._c) - 1 do
         C.check(lib.lw_optimizer_state(self._c, k, entry), "optimizer:state_bytes")
         total = total + 4 * tonumber(entry.count) * (entry.muon and 1 or 2)
         if entry.master ~= nil then master = master + 4 * tonumber(entry.count) end
      end
      self._state_bytes, self._master_bytes = total, master
   end
   return self._state_bytes, self._master_bytes
end

local result = ffi.new("lw_step_result")

-- One step. lr_scale (default 1) multiplies every group's lr: schedules pass it each step.
-- Returns { ok, grad_norm, zeros, skipped, skips, step, time = { grad_sync, norm, muon, adamw,
-- param_sync, muon_comm } } (seconds; muon_comm: row-sharded Muon's gathers, part of muon); ok
-- is false when a non-finite norm skipped the update.
function Optimizer:step(lr_scale)
   lr_scale = lr_scale or 1
   if lr_scale ~= self._lr_scale then
      if type(lr_scale) ~= "number" or lr_scale < 0 then
         errors.misuse("optimizer:step", "lr_scale must be a number >= 0")
      end
      self._lr_scale = lr_scale
      self:_send_hparams("optimizer:step")
   end
   C.check(lib.lw_optimizer_step(self._c, result), "optimizer:step")
   return {
      ok = not result.skipped, grad_norm = result.grad_norm, zeros = tonumber(result.zeros),
      skipped = result.skipped, skips = tonumber(result.skips), step = tonumber(result.step),
      time = { grad_sync = result.seconds_grad_sync, norm = result.seconds_norm,
               muon = result.seconds_muon, adamw = result.seconds_adamw,
               param_sync = result.seconds_param_sync, muon_comm = result.seconds_muon_comm },
   }
end

return optim
