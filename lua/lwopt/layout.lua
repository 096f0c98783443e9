-- layout.lua: lw.layout.compute over the C layout engine (src/core/layout*.c). Reads the
-- finished layout into plain Lua tables (buffers, buckets, places) once; :check and :hash ask
-- the C object, :show draws the map (layout_show.lua), :json serialises it.
local ffi = require("ffi")
local C = require("lwopt.C")
local route = require("lwopt.route")
local json = require("lwopt.json")
local errors = require("lwopt.errors")
local options = require("lwopt.options")
local kinds = require("lwopt.optim_kinds")

local lib = C.lib
local layout = {}

local Layout = {}
Layout.__index = Layout

local WHERE = "lw.layout.compute"

-- The layout algorithms, named by the C library (lw_algorithm_name), and its defaults.
layout.algorithms = C.names("algorithm")
local c_defaults = lib.lw_layout_defaults()
layout.defaults = { algorithm = C.name("algorithm", c_defaults.algorithm),
   adamw_layout = C.name("algorithm", c_defaults.adamw_algorithm) }
-- The layouts offered to AdamW buffers: "aligned" (the Muon buffers' shard-aligned algorithm,
-- so AdamW parameters are owned whole) or one of these algorithms.
layout.adamw_layouts = { "distopt", "aligned", "default", "legacy" }
-- The dtypes a parameter may have: lw_dtype's up to f16 (f64 and i64 are for reductions only).
layout.dtypes = {}
for v = 0, lib.LW_DTYPE_F16 do layout.dtypes[v + 1] = C.name("dtype", v) end

local function param_dtype(word)
   local v = C.value("dtype", word)
   if v ~= nil and v <= lib.LW_DTYPE_F16 then return v end
end

-- The largest data-parallel size the layout engine takes (a million ranks).
layout.MAX_DP = 2 ^ 20

-- The options lw.layout.compute takes: the fields of lw_layout_options by their C names (read
-- from the cdef: lwopt.options), adamw_algorithm under its Lua name adamw_layout. Those checked
-- below have their own words; another is set as given, C checking its range.
local RENAMED = { adamw_algorithm = "adamw_layout" }
local option_names = {}
for _, f in ipairs(options.fields("lw_layout_options")) do
   option_names[RENAMED[f.name] or f.name] = true
end
local CHECKED = { dp = true, expert_dp = true, bucket_size = true, algorithm = true,
   adamw_algorithm = true, high_busbw = true }

local fail = errors.failer(WHERE)

local function is_integer(v)
   return type(v) == "number" and v == math.floor(v) and v > -2 ^ 53 and v < 2 ^ 53
end

-- The lw_algorithm of an AdamW layout (one of layout.adamw_layouts) when the Muon buffers use
-- `algorithm` (a name); nil and a message for an unknown layout.
function layout.adamw_algorithm(adamw_layout, algorithm)
   for _, known in ipairs(layout.adamw_layouts) do
      if adamw_layout == known then
         return C.value("algorithm", adamw_layout == "aligned" and algorithm or adamw_layout)
      end
   end
   return nil, ("unknown adamw_layout '%s' (one of %s)"):format(tostring(adamw_layout),
      table.concat(layout.adamw_layouts, ", "))
end

-- Checks and completes the options; returns the normalised table.
local function normalise(opts)
   if opts ~= nil and type(opts) ~= "table" then fail("options must be a table, got %s", type(opts)) end
   opts = opts or {}
   for k in pairs(opts) do
      if not option_names[k] then fail("unknown option '%s'", tostring(k)) end
   end
   local o = {}
   o.dp = opts.dp == nil and 1 or opts.dp
   if not is_integer(o.dp) then fail("dp must be an integer, got %s", tostring(o.dp)) end
   o.expert_dp = opts.expert_dp == nil and o.dp or opts.expert_dp
   if not is_integer(o.expert_dp) then
      fail("expert_dp must be an integer, got %s", tostring(o.expert_dp))
   end
   -- the C options are 32-bit: refuse here rather than let a large count wrap around
   for _, key in ipairs({ "dp", "expert_dp" }) do
      if o[key] > layout.MAX_DP then
         fail("%s must be at most %d, got %s", key, layout.MAX_DP, ("%.0f"):format(o[key]))
      end
   end
   o.bucket_size = opts.bucket_size
   if o.bucket_size ~= nil and not is_integer(o.bucket_size) then
      fail("bucket_size must be an integer number of elements or nil, got %s",
         tostring(o.bucket_size))
   end
   o.algorithm = opts.algorithm or layout.defaults.algorithm
   local known, why = C.value("algorithm", o.algorithm)
   if known == nil then fail("%s", why) end
   local simple = o.algorithm == "default" or o.algorithm == "legacy"
   o.adamw_layout = opts.adamw_layout or (simple and o.algorithm or layout.defaults.adamw_layout)
   known, why = layout.adamw_algorithm(o.adamw_layout, o.algorithm)
   if known == nil then fail("%s", why) end
   o.high_busbw = opts.high_busbw or false
   if type(o.high_busbw) ~= "boolean" then fail("high_busbw must be a boolean") end
   for _, f in ipairs(options.fields("lw_layout_options")) do
      if not CHECKED[f.name] then o[f.name] = opts[f.name] end
   end
   return o
end

local function c_options(o)
   local c = lib.lw_layout_defaults()
   c.dp = o.dp
   c.expert_dp = o.expert_dp
   if o.bucket_size ~= nil then c.bucket_size = o.bucket_size end
   c.algorithm = C.value("algorithm", o.algorithm)
   c.adamw_algorithm = layout.adamw_algorithm(o.adamw_layout, o.algorithm)
   c.high_busbw = o.high_busbw
   for _, f in ipairs(options.fields("lw_layout_options")) do
      if not CHECKED[f.name] and f.kind ~= "pointer" and o[f.name] ~= nil then
         c[f.name] = o[f.name]
      end
   end
   return c
end

-- A spec's tensor parallelism into its lw_param_spec (ranges are the C library's checks, which
-- name the numbers): tp = { dim = 0 | 1, blocks = b (default 1) } on a TP shard (no tp:
-- replicated over TP); qkv = { groups = g, rows = { q, k, v } } on a fused QKV weight.
local function tp_fields(cs, s)
   local name = s.name
   if s.tp ~= nil then
      if type(s.tp) ~= "table" then
         fail("parameter '%s' has tp = %s: a table { dim, blocks }", name, tostring(s.tp))
      end
      local blocks = s.tp.blocks == nil and 1 or s.tp.blocks
      if not is_integer(s.tp.dim) or not is_integer(blocks) then
         fail("parameter '%s' has tp = { dim = %s, blocks = %s }: integers needed", name,
            tostring(s.tp.dim), tostring(s.tp.blocks))
      end
      if blocks < 1 then fail("parameter '%s' has tp.blocks %d (>= 1)", name, blocks) end
      cs.tp_dim = s.tp.dim
      cs.tp_blocks = blocks
   end
   if s.qkv ~= nil then
      local q = s.qkv
      if type(q) ~= "table" or type(q.rows) ~= "table" or #q.rows ~= 3 or not is_integer(q.groups)
         or not (is_integer(q.rows[1]) and is_integer(q.rows[2]) and is_integer(q.rows[3])) then
         fail("parameter '%s' has a bad qkv: { groups = g, rows = { q, k, v } } of integers needed",
            name)
      end
      if q.groups < 1 then fail("parameter '%s' has qkv.groups %d (>= 1)", name, q.groups) end
      cs.qkv_groups = q.groups
      for c = 1, 3 do cs.qkv_rows[c - 1] = q.rows[c] end
   end
end

local function c_specs(specs)
   local n = #specs
   local c = ffi.new("lw_param_spec[?]", math.max(n, 1))
   for i, s in ipairs(specs) do
      local name = s.name
      if type(name) ~= "string" then fail("spec %d has no string name", i) end
      if type(s.shape) ~= "table" then fail("parameter '%s' has no shape table", name) end
      local kind = kinds.get(s.optimizer, WHERE, ("parameter '%s': optimizer"):format(name))
      local cs = c[i - 1]
      cs.name = name -- the Lua string stays alive in specs for the duration of the call
      cs.ndim = #s.shape
      for d, size in ipairs(s.shape) do
         if not is_integer(size) then
            fail("parameter '%s' has shape %s: sizes must be integers", name,
               route.shape_text(s.shape))
         end
         if d <= 4 then cs.shape[d - 1] = size end
      end
      local dtype, grad_dtype = s.dtype or "f32", s.grad_dtype or "f32"
      cs.dtype = param_dtype(dtype) or fail("parameter '%s' has unknown dtype '%s'", name, dtype)
      cs.grad_dtype = param_dtype(grad_dtype)
         or fail("parameter '%s' has unknown grad_dtype '%s'", name, grad_dtype)
      cs.expert = s.expert == true
      cs.shared_embedding = s.shared_embedding == true
      cs.optimizer = kind.value
      tp_fields(cs, s)
   end
   return c, n
end

-- A record that reads both by field and by position, as the contract writes it positionally.
local function record(names, values)
   local t = {}
   for i, k in ipairs(names) do
      t[k] = values[i]
      t[i] = values[i]
   end
   return t
end

local KEY = { "param_dtype", "grad_dtype", "expert", "optimizer", "whole" }
local BUCKET = { "start", "stop", "shard_size", "numel_unpadded" }

local shard_start, shard_count = ffi.new("int64_t[1]"), ffi.new("int64_t[1]")

-- Reads the C layout into Lua tables.
local function read(self, specs)
   local c = self._c
   local buffer_info, bucket_info = ffi.new("lw_buffer_info"), ffi.new("lw_bucket_info")
   local place, index = ffi.new("lw_param_place"), ffi.new("int32_t[1]")
   self.params = {}
   self._by_name = {}
   for i, s in ipairs(specs) do
      C.check(lib.lw_layout_place(c, i - 1, place), WHERE)
      local p = {
         name = s.name, shape = s.shape, optimizer = s.optimizer, role = s.role,
         shared_embedding = s.shared_embedding == true, expert = s.expert == true,
         tp = s.tp, qkv = s.qkv,
         buffer = place.buffer + 1, bucket = place.bucket + 1,
         start = tonumber(place.start), stop = tonumber(place.stop),
         owner = place.owner >= 0 and place.owner or nil,
      }
      p.numel = p.stop - p.start
      self.params[i] = p
      self._by_name[s.name] = p
   end
   self.buffers = {}
   for b = 0, lib.lw_layout_num_buffers(c) - 1 do
      C.check(lib.lw_layout_buffer(c, b, buffer_info), WHERE)
      local buffer = {
         key = record(KEY, { C.name("dtype", buffer_info.param_dtype),
            C.name("dtype", buffer_info.grad_dtype), buffer_info.expert,
            C.name("optimizer_kind", buffer_info.optimizer), buffer_info.whole }),
         algorithm = C.name("algorithm", buffer_info.algorithm),
         dp = buffer_info.dp,
         numel = tonumber(buffer_info.numel),
         buckets = {},
         params = {},
      }
      for k = 0, buffer_info.n_buckets - 1 do
         C.check(lib.lw_layout_bucket(c, b, k, bucket_info), WHERE)
         local bucket = record(BUCKET, { tonumber(bucket_info.start), tonumber(bucket_info.stop),
            tonumber(bucket_info.shard_size), tonumber(bucket_info.numel_unpadded) })
         bucket.params = {}
         if buffer.algorithm == "packed" then -- shards of unequal size: { start, count } per rank
            bucket.shards = {}
            for r = 0, buffer.dp - 1 do
               C.check(lib.lw_layout_shard(c, b, k, r, shard_start, shard_count), WHERE)
               bucket.shards[r + 1] = { start = tonumber(shard_start[0]),
                                        count = tonumber(shard_count[0]) }
            end
         end
         for e = 0, bucket_info.n_params - 1 do
            C.check(lib.lw_layout_bucket_param(c, b, k, e, index), WHERE)
            bucket.params[e + 1] = specs[index[0] + 1].name
         end
         buffer.buckets[k + 1] = bucket
      end
      self.buffers[b + 1] = buffer
   end
   for _, p in ipairs(self.params) do
      local list = self.buffers[p.buffer].params
      list[#list + 1] = p.name
   end
end

-- lw.layout.compute(specs, opts): the layout of specs (definition order) for the options
-- { dp, expert_dp, bucket_size, algorithm, adamw_layout, high_busbw } (docs/layout.md, "Options").
function layout.compute(specs, opts)
   local o = normalise(opts)
   specs = route.fill(specs, WHERE)
   local c_spec, n = c_specs(specs)
   local out = ffi.new("lw_layout*[1]")
   C.check(lib.lw_layout_new(c_spec, n, c_options(o), out), WHERE)
   local self = setmetatable({}, Layout)
   self._c = ffi.gc(out[0], lib.lw_layout_free)
   self.options = o
   for k, v in pairs(o) do self[k] = v end
   read(self, specs)
   return self
end

-- { buffer, bucket, start, stop, owner } of a parameter (1-based buffer and bucket, 0-based
-- element offsets, 0-based owner rank or nil when the buffer is element-wise or unsharded).
function Layout:place(name)
   local p = self._by_name[name]
   if p == nil then errors.misuse("layout:place", "no parameter named '%s'", tostring(name)) end
   return { buffer = p.buffer, bucket = p.bucket, start = p.start, stop = p.stop,
            owner = p.owner, numel = p.numel }
end

-- Rank `rank`'s (0-based) shard of a bucket (1-based buffer and bucket): its 0-based start in
-- the buffer and its count of elements (lw_layout_shard: equal shards, the packed layout's
-- unequal ones, or the whole bucket for an unsharded buffer).
function Layout:shard(buffer, bucket, rank)
   C.check(lib.lw_layout_shard(self._c, buffer - 1, bucket - 1, rank, shard_start, shard_count),
      "layout:shard")
   return tonumber(shard_start[0]), tonumber(shard_count[0])
end

function Layout:stats()
   local s = ffi.new("lw_layout_stats")
   C.check(lib.lw_layout_stats_get(self._c, s), "layout:stats")
   local numel, cost = ffi.new("int64_t[1]"), ffi.new("double[1]")
   local rank_numel, rank_cost = {}, {}
   for r = 0, s.ranks - 1 do
      C.check(lib.lw_layout_rank_load(self._c, r, numel, cost), "layout:stats")
      rank_numel[r + 1] = tonumber(numel[0])
      rank_cost[r + 1] = cost[0]
   end
   return {
      params = s.params, numel = tonumber(s.numel), buffer_numel = tonumber(s.buffer_numel),
      padding = tonumber(s.padding), overhead = s.overhead,
      muon_numel = tonumber(s.muon_numel), muon_buffer_numel = tonumber(s.muon_buffer_numel),
      muon_padding = tonumber(s.muon_buffer_numel - s.muon_numel),
      muon_overhead = s.muon_overhead,
      numel_imbalance = s.numel_imbalance, cost_imbalance = s.cost_imbalance,
      cost_imbalance_bound = s.cost_imbalance_bound,
      ranks = s.ranks, rank_numel = rank_numel, rank_cost = rank_cost,
   }
end

-- true, or false and the first violated invariant.
function Layout:check()
   if lib.lw_layout_check(self._c) == 0 then return true end
   return false, C.last_error()
end

function Layout:hash()
   local hex = ffi.new("char[17]")
   C.check(lib.lw_layout_hash(self._c, hex), "layout:hash")
   return ffi.string(hex)
end

function Layout:show(opts)
   return require("lwopt.layout_show").show(self, opts)
end

function Layout:summary(opts)
   return require("lwopt.layout_show").summary(self, opts)
end

Layout.__tostring = function(self) return self:show() end

-- The layout as JSON: options, hash, buffers with buckets and placed params, stats.
function Layout:json(indent)
   local buffers = {}
   for b, buffer in ipairs(self.buffers) do
      local buckets = {}
      for k, bucket in ipairs(buffer.buckets) do
         local params = {}
         for e, name in ipairs(bucket.params) do
            local p = self._by_name[name]
            params[e] = json.object({ name = name, shape = json.array(p.shape), start = p.start,
                                      stop = p.stop, owner = p.owner == nil and json.null or p.owner, optimizer = p.optimizer })
         end
         local shards = json.null
         if bucket.shards then
            shards = json.array({})
            for r, sh in ipairs(bucket.shards) do
               shards[r] = json.object({ start = sh.start, count = sh.count })
            end
         end
         buckets[k] = json.object({ start = bucket.start, stop = bucket.stop,
            shard_size = bucket.shard_size, numel_unpadded = bucket.numel_unpadded,
            shards = shards, params = json.array(params) })
      end
      buffers[b] = json.object({
         key = json.object({ param_dtype = buffer.key.param_dtype,
            grad_dtype = buffer.key.grad_dtype, expert = buffer.key.expert,
            optimizer = buffer.key.optimizer, whole = buffer.key.whole }),
         algorithm = buffer.algorithm, dp = buffer.dp, numel = buffer.numel,
         buckets = json.array(buckets),
      })
   end
   local stats = self:stats()
   stats.rank_numel = json.array(stats.rank_numel)
   stats.rank_cost = json.array(stats.rank_cost)
   local given = json.object({})
   for k, v in pairs(self.options) do given[k] = v end
   return json.encode(json.object({ options = given, hash = self:hash(),
      buffers = json.array(buffers), stats = json.object(stats) }), indent)
end

-- Padding rules of docs/algorithms.md section 3.
function layout.bucket_end_divisor(dp, high_busbw)
   return tonumber(lib.lw_bucket_end_divisor(dp, high_busbw or false))
end

function layout.shard_divisor(dp, high_busbw)
   return tonumber(lib.lw_shard_divisor(dp, high_busbw or false))
end

return layout
