-- nn/moe.lua: MoE, a mixture of experts in place of a Block's MLP (expert parallelism, ep > 1,
-- below): a router Linear (c -> n_expert, no bias), top-k routing with renormalised weights
-- (lw_moe_router_forward), dropless dispatch (every token reaches its k distinct experts), each
-- expert an MLP (c -> expert_hidden -> c, of the model's activation: GELU, ReLU^2 or SwiGLU) run
-- on the rows routed to it, the weighted combine back into token order, the load-balancing loss
-- (lw_moe_aux_loss_*), and an optional shared expert every token goes through, added
-- unweighted. The module contract is in nn/module.lua.
--
-- The permutation (assignments sorted by expert, stable in token order) is built on the host
-- from the experts array, copied there through lw_device_copy: per forward one copy of n*k
-- int32 down and two up. The experts' activations are row windows of buffers of all n*k rows
-- (Module:share_rows), so a layer holds n*k rows of expert activations however the tokens
-- fall, as a dense MLP holds n. An expert with no tokens runs nothing and its gradient stays zero, but
-- its parameters are still acquired and released (and reported ready in backward) in the same
-- order as the others, since at ZeRO-3 acquiring is collective and every rank must do the same.
--
-- Expert parallelism (cfg.ep, from lw.ep.groups: an EP group of E ranks): this rank declares only
-- its experts [first, first + n_expert/E), named by global index. After the permutation, the
-- rows for each expert go to the EP rank holding it by lw_comm_alltoallv (the per-expert counts
-- first, over the host communicator; then the rows), arrive grouped by source rank, are
-- reordered expert-major for the local experts, and their outputs return by the reverse
-- all-to-all before the combine. Backward mirrors it: the output gradients go forward to the
-- expert ranks, the input gradients come back. Every rank's expert gradient sums the whole EP
-- group's tokens while lw.ddp averages expert buffers over the expert-DP group (W/E ranks) and
-- dense ones over the world (W): the output gradients reaching the experts are scaled by 1/E and
-- the input gradients sent back by E (exact for E a power of two), so both are averages over W.
-- The load-balancing loss's f and P are this rank's tokens' (as a rank's at ep 1: each
-- micro-batch balances its own tokens), not reduced over the EP group.
local ffi = require("ffi")
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local Linear = require("lwopt.nn.linear")
local MLP = require("lwopt.nn.mlp")
local errors = require("lwopt.errors")

local lib = C.lib
local zero = base.zero
local check = base.check

local MoE = base.class(base.Module)
MoE.shape_args = { "n" }

MoE.DEFAULTS = { topk = 2, aux_coef = 0.01, shared_expert = false, router_muon = false,
                 bias = false, ep = false, activation = "gelu" }

local function is_count(v) return type(v) == "number" and v == math.floor(v) and v >= 1
   and v < 2 ^ 31 end

-- The module's settings, defaults filled, or an error naming the value.
local function settings(c, cfg)
   local fail = errors.failer("nn.MoE")
   local o = {}
   for k, v in pairs(MoE.DEFAULTS) do o[k] = v end
   local unknown = {}
   for k, v in pairs(cfg or {}) do
      if MoE.DEFAULTS[k] == nil and k ~= "n_expert" and k ~= "expert_hidden" then
         unknown[#unknown + 1] = tostring(k)
      end
      o[k] = v
   end
   if #unknown > 0 then
      table.sort(unknown)
      fail("unknown field '%s'", unknown[1])
   end
   o.expert_hidden = o.expert_hidden or 4 * c
   if not is_count(o.n_expert) then
      fail("n_expert (%s) must be a positive integer", tostring(o.n_expert))
   end
   if not is_count(o.topk) or o.topk > o.n_expert then
      fail("topk (%s) must be between 1 and n_expert (%d)", tostring(o.topk), o.n_expert)
   end
   if not is_count(o.expert_hidden) then
      fail("expert_hidden (%s) must be a positive integer", tostring(o.expert_hidden))
   end
   if type(o.aux_coef) ~= "number" or not (o.aux_coef >= 0 and o.aux_coef < math.huge) then
      fail("aux_coef (%s) must be a finite number >= 0", tostring(o.aux_coef))
   end
   if o.ep then
      if type(o.ep) ~= "table" or not o.ep.size or not o.ep.comm then
         fail("ep must be lw.ep.groups(comm, ep, n_expert)'s table, got %s", tostring(o.ep))
      end
      if o.n_expert % o.ep.size ~= 0 then
         fail("ep %d does not divide the %d experts", o.ep.size, o.n_expert)
      end
      if o.ep.size == 1 then o.ep = false end
   end
   return o
end

-- MoE(prefix, c, cfg): cfg = { n_expert, topk = 2, expert_hidden = 4c, aux_coef = 0.01,
-- shared_expert = false, router_muon = false, bias = false, ep = false (or lw.ep.groups's
-- table: this rank's experts only), activation = "gelu" (every expert's and the shared one's:
-- nn.MLP's "gelu", "relu2" or "swiglu", whose fc is then 2 expert_hidden rows: gate, up) }.
-- Parameters, in this order: router.weight {n_expert, c} (use_muon = false unless router_muon:
-- AdamW by the default routing rules; a rule of one's own may still send it to Muon),
-- experts.<e>.fc / .proj (role "expert", expert = true: the layout puts them in expert buffers),
-- shared.fc / .proj (dense).
function MoE.new(prefix, c, cfg)
   local self = setmetatable({}, MoE):init(prefix)
   local o = settings(c, cfg)
   self.c, self.n_expert, self.topk, self.aux_coef = c, o.n_expert, o.topk, o.aux_coef
   self.expert_hidden = o.expert_hidden
   self.router = self:add(Linear.new(prefix .. "router.", c, o.n_expert, false,
      not o.router_muon and { use_muon = false } or nil))
   -- the experts held here: global indices first .. first + n_local - 1 (all of them at ep 1)
   self.ep = o.ep or nil
   self.first, self.n_local = 0, o.n_expert
   if self.ep then
      self.n_local = o.n_expert / self.ep.size
      self.first = self.ep.rank * self.n_local
   end
   self.experts = {}
   for l = 1, self.n_local do
      local e = self.first + l - 1
      self.experts[l] = self:add(MLP.new(prefix .. "experts." .. e .. ".", c, o.bias,
         o.expert_hidden, { role = "expert", expert = true }, nil, o.activation))
   end
   if o.shared_expert then
      self.shared = self:add(MLP.new(prefix .. "shared.", c, o.bias, o.expert_hidden, nil, nil,
         o.activation))
   end
   -- per expert (1-based), from the last forward: rows routed to it and where they start in
   -- the permuted order; its MLP's output
   self.counts, self.offsets, self.outs, self.next = {}, {}, {}, {}
   for e = 1, o.n_expert do self.counts[e], self.offsets[e] = 0, 0 end
   self.idle = 0 -- experts that received no token in the last forward
   self.aux_loss = 0 -- the load-balancing loss of the last forward
   self.aux_scale = 1 -- the weight of its gradient in backward (nn.GPT sets its loss_scale)
   return self
end


-- Acquires and releases the parameters of module m and the modules under it as a run would,
-- in the pass's order (backward: children reversed, gradients reported), computing nothing:
-- an expert that received no token still takes its turn in the hooks.
local function nothing() end
local function idle(m, pass)
   if #m.own > 0 then m:with_params(pass, nothing) end
   local kids = {}
   for _, e in ipairs(m.entries) do
      if e.child then kids[#kids + 1] = e.child end
   end
   local first, last, step = 1, #kids, 1
   if pass == "backward" then first, last, step = #kids, 1, -1 end
   for i = first, last, step do idle(kids[i], pass) end
end

-- The permutation of the last routing: the experts array copied to the host, the assignments
-- a = token * k + slot counted per expert and sorted by expert (stable: in token order within
-- one), rows[p] = the token and slots[p] = a of the p-th, both uploaded to the device.
local function permute(self, n)
   local E, k = self.n_expert, self.topk
   local m = n * k
   local ex = self:host_array("experts", "int32_t", m)
   check(lib.lw_device_copy(self.stream, ex, self.experts_dev, 4 * m,
      lib.LW_COPY_DEVICE_TO_HOST))
   local counts, offsets, next = self.counts, self.offsets, self.next
   for e = 1, E do counts[e] = 0 end
   for a = 0, m - 1 do
      local e = ex[a]
      if e < 0 or e >= E then -- a kernel's contract broken: refuse before indexing with it
         errors.fail("nn.MoE", "the router chose expert %d for assignment %d, outside [0, %d)",
            e, a, E)
      end
      counts[e + 1] = counts[e + 1] + 1
   end
   local at, idle_count = 0, 0
   for e = 1, E do
      offsets[e], next[e] = at, at
      at = at + counts[e]
      if counts[e] == 0 then idle_count = idle_count + 1 end
   end
   self.idle = idle_count
   local rows = self:host_array("rows", "int32_t", m)
   local slots = self:host_array("slots", "int32_t", m)
   for a = 0, m - 1 do
      local e = ex[a] + 1
      local p = next[e]
      rows[p], slots[p] = (a - a % k) / k, a
      next[e] = p + 1
   end
   self.rows = self:int_buffer("rows", m)
   self.slots = self:int_buffer("slots", m)
   check(lib.lw_device_copy(self.stream, self.rows, rows, 4 * m, lib.LW_COPY_HOST_TO_DEVICE))
   check(lib.lw_device_copy(self.stream, self.slots, slots, 4 * m, lib.LW_COPY_HOST_TO_DEVICE))
end

-- ---- expert parallelism ------------------------------------------------------------------------

-- The communicator that moves this module's device memory within the EP group: the EP group's
-- own on the CPU, a device communicator over it otherwise (made once, collectively, and shared
-- by every layer through the groups table).
local function payload_comm(self)
   local g = self.ep
   local device = self.device or lib.lw_device_cpu()
   if g.comm:reaches(device) then return g.comm end
   if not g.device_comm then g.device_comm = require("lwopt.comm").device(g.comm, device) end
   return g.device_comm
end

-- The exchange's plan after permute: the per-expert counts to every EP rank (counts first), the
-- rows sent to and received from each rank, and gidx[p] = the source-major row (as received) of
-- the p-th row in expert-major order (local expert, then source rank), uploaded. Sets
-- self.recv_total and self.lcounts / self.loffsets (rows per local expert, expert-major).
local function plan_exchange(self)
   local g, L = self.ep, self.n_local
   local E = g.size
   local sc = self:host_array("count send", "int64_t", self.n_expert)
   for e = 1, self.n_expert do sc[e - 1] = self.counts[e] end
   local per = self:host_array("count per", "int64_t", E)
   for j = 0, E - 1 do per[j] = L end
   local rc = self:host_array("count recv", "int64_t", E * L)
   g.comm:set_label("nn.MoE: the experts' row counts")
   check(lib.lw_comm_alltoallv(g.comm._c, sc, per, rc, per, lib.LW_DTYPE_I64, nil))
   local c = self.c
   local send = self:host_array("send", "int64_t", E)
   local recv = self:host_array("recv", "int64_t", E)
   local from = {} -- first source-major row of each source rank's rows
   local total = 0
   for j = 0, E - 1 do
      local out, inn = 0, 0
      for l = 0, L - 1 do
         out = out + self.counts[j * L + l + 1]
         inn = inn + tonumber(rc[j * L + l])
      end
      send[j], recv[j] = out * c, inn * c
      from[j] = total
      total = total + inn
   end
   self.recv_total = total
   local lcounts, loffsets = {}, {}
   local gidx = self:host_array("gidx", "int32_t", total)
   local p = 0
   for l = 0, L - 1 do
      loffsets[l + 1] = p
      for j = 0, E - 1 do
         local at = from[j]
         for l2 = 0, l - 1 do at = at + tonumber(rc[j * L + l2]) end
         for i = 0, tonumber(rc[j * L + l]) - 1 do
            gidx[p] = at + i
            p = p + 1
         end
      end
      lcounts[l + 1] = p - loffsets[l + 1]
   end
   self.lcounts, self.loffsets = lcounts, loffsets
   self.gidx = self:int_buffer("gidx", math.max(total, 1))
   if total > 0 then
      check(lib.lw_device_copy(self.stream, self.gidx, gidx, 4 * total,
         lib.LW_COPY_HOST_TO_DEVICE))
   end
   self.send_counts, self.recv_counts = send, recv
end

-- Rows [m, c] in this rank's expert order to the expert ranks (or, reverse, back): send_counts
-- and recv_counts in floats per EP rank.
local function exchange(self, send, send_counts, recv, recv_counts, what)
   local pc = payload_comm(self)
   pc:set_label(what)
   check(lib.lw_comm_alltoallv(pc._c, send, send_counts, recv, recv_counts, lib.LW_DTYPE_F32,
      nil))
end

-- The experts' part of forward at ep > 1: xs [m, c] (expert order) out, their outputs ys [m, c]
-- back in the same order.
local function ep_forward(self, m)
   local c, s = self.c, self.stream
   plan_exchange(self)
   local R = self.recv_total
   local xr = self:buffer("xr", math.max(R, 1) * c)
   exchange(self, self.xs, self.send_counts, xr, self.recv_counts, "nn.MoE: rows to the experts")
   -- expert-major: the experts' inputs, windows of one buffer of all R rows
   self.xe = self:buffer("xe", math.max(R, 1) * c)
   if R > 0 then check(lib.lw_gather_forward(s, self.xe, xr, self.gidx, R, c)) end
   local yr = self:buffer("yr", math.max(R, 1) * c)
   zero(yr, math.max(R, 1) * c, s)
   for l = 1, self.n_local do
      local count, off = self.lcounts[l], self.loffsets[l]
      if count > 0 then
         self:share_rows(self.experts[l], off, count, math.max(R, 1))
         local out = self.experts[l]:forward(self.xe + off * c, count)
         -- back to source-major order, as the rows arrived
         check(lib.lw_gather_backward(s, yr, out, self.gidx + off, count, c))
      else
         idle(self.experts[l], "forward")
      end
   end
   self.ys = self:buffer("ys", m * c)
   exchange(self, yr, self.recv_counts, self.ys, self.send_counts,
      "nn.MoE: expert outputs back")
end

-- The experts' part of backward at ep > 1: dys [m, c] (output gradients, expert order) to the
-- expert ranks, the input gradients back into dxs [m, c].
local function ep_backward(self, dys, dxs, m)
   local c, s, E = self.c, self.stream, self.ep.size
   local R = self.recv_total
   local rows = math.max(R, 1)
   local dyr = self:buffer("dyr", rows * c)
   exchange(self, dys, self.send_counts, dyr, self.recv_counts,
      "nn.MoE: output gradients to the experts")
   -- 1/E: the expert gradients sum the EP group's tokens, averaged by lw.ddp over W/E ranks
   if R > 0 then check(lib.lw_vec_scale(s, dyr, R * c, 1 / E)) end
   local dxr = self:buffer("dxr", rows * c)
   zero(dxr, rows * c, s)
   for l = self.n_local, 1, -1 do
      local count, off = self.lcounts[l], self.loffsets[l]
      if count > 0 then
         local dsrc = self:buffer("dsrc", count * c)
         check(lib.lw_gather_forward(s, dsrc, dyr, self.gidx + off, count, c))
         local dxl = self:buffer("dxl", count * c)
         zero(dxl, count * c, s)
         self:share_rows(self.experts[l], off, count, rows)
         self.experts[l]:backward(self.xe + off * c, dsrc, dxl, count)
         check(lib.lw_gather_backward(s, dxr, dxl, self.gidx + off, count, c))
      else
         idle(self.experts[l], "backward")
      end
   end
   if R > 0 then check(lib.lw_vec_scale(s, dxr, R * c, E)) end
   exchange(self, dxr, self.recv_counts, dxs, self.send_counts,
      "nn.MoE: input gradients back")
end

local loss_cell = ffi.new("double[1]")

-- x: float* [n, c] -> float* [n, c]
function MoE:forward(x, n)
   local E, k, c, s = self.n_expert, self.topk, self.c, self.stream
   local m = n * k
   local logits = self.router:forward(x, n)
   self.experts_dev = self:int_buffer("experts", m)
   self.weights = self:buffer("weights", m)
   self.probs = self:buffer("probs", n * E)
   check(lib.lw_moe_router_forward(s, self.experts_dev, self.weights, self.probs, logits, n, E,
      k))
   self.aux_loss = 0
   if self.aux_coef > 0 then
      check(lib.lw_moe_aux_loss_forward(s, self.probs, self.experts_dev, n, E, k, self.aux_coef,
         loss_cell))
      self.aux_loss = loss_cell[0]
   end
   permute(self, n)
   -- dispatch: the tokens' rows and their weights in expert order
   self.xs = self:buffer("xs", m * c)
   self.ws = self:buffer("ws", m)
   check(lib.lw_gather_forward(s, self.xs, x, self.rows, m, c))
   check(lib.lw_gather_forward(s, self.ws, self.weights, self.slots, m, 1))
   local y = self:buffer("y", n * c)
   zero(y, n * c, s)
   if self.ep then
      ep_forward(self, m)
      for e = 1, E do
         local count, off = self.counts[e], self.offsets[e]
         if count > 0 then
            check(lib.lw_combine_forward(s, y, self.ys + off * c, self.ws + off, self.rows + off,
               count, c))
         end
      end
   else for e = 1, E do
      local count, off = self.counts[e], self.offsets[e]
      if count > 0 then
         -- the experts' activations are windows of buffers of all m rows (Module:share_rows)
         self:share_rows(self.experts[e], off, count, m)
         local out = self.experts[e]:forward(self.xs + off * c, count)
         self.outs[e] = out
         check(lib.lw_combine_forward(s, y, out, self.ws + off, self.rows + off, count, c))
      else
         self.outs[e] = nil
         idle(self.experts[e], "forward")
      end
   end end
   if self.shared then
      check(lib.lw_vec_add(s, y, y, self.shared:forward(x, n), n * c))
   end
   return y
end

-- Accumulates into dx and the parameter gradients, the load-balancing loss's included (its
-- gradient weighted by self.aux_scale). Backprop order: the shared expert, the experts from the
-- last, the router.
function MoE:backward(x, dout, dx, n)
   local E, k, c, s = self.n_expert, self.topk, self.c, self.stream
   local m = n * k
   if self.shared then self.shared:backward(x, dout, dx, n) end
   local dxs, dws = self:buffer("dxs", m * c), self:buffer("dws", m)
   zero(dxs, m * c, s)
   zero(dws, m, s)
   if self.ep then
      local dys = self:buffer("dys", m * c)
      zero(dys, m * c, s)
      for e = E, 1, -1 do
         local count, off = self.counts[e], self.offsets[e]
         if count > 0 then
            check(lib.lw_combine_backward(s, dys + off * c, dws + off, dout, self.ys + off * c,
               self.ws + off, self.rows + off, count, c))
         end
      end
      ep_backward(self, dys, dxs, m)
   else for e = E, 1, -1 do
      local count, off = self.counts[e], self.offsets[e]
      if count > 0 then
         -- one buffer for every expert's output gradient, used one expert at a time
         local dsrc = self:buffer("dsrc", count * c)
         zero(dsrc, count * c, s)
         check(lib.lw_combine_backward(s, dsrc, dws + off, dout, self.outs[e], self.ws + off,
            self.rows + off, count, c))
         self:share_rows(self.experts[e], off, count, m)
         self.experts[e]:backward(self.xs + off * c, dsrc, dxs + off * c, count)
      else
         idle(self.experts[e], "backward")
      end
   end end
   if dx ~= nil then check(lib.lw_gather_backward(s, dx, dxs, self.rows, m, c)) end
   local dweights = self:buffer("dweights", m)
   zero(dweights, m, s)
   check(lib.lw_gather_backward(s, dweights, dws, self.slots, m, 1))
   local dprobs = nil
   if self.aux_coef > 0 then
      dprobs = self:buffer("dprobs", n * E)
      zero(dprobs, n * E, s)
      check(lib.lw_moe_aux_loss_backward(s, dprobs, self.experts_dev, n, E, k, self.aux_coef,
         self.aux_scale))
   end
   local dlogits = self:buffer("dlogits", n * E)
   zero(dlogits, n * E, s)
   check(lib.lw_moe_router_backward(s, dlogits, dweights, dprobs, self.probs, self.experts_dev, n,
      E, k))
   self.router:backward(x, dlogits, dx, n)
end

-- Rows routed to each expert in the last forward: a new list, expert 0 first.
function MoE:expert_counts()
   local out = {}
   for e = 1, self.n_expert do out[e] = self.counts[e] end
   return out
end

return MoE
