-- layout_show.lua: a layout as text a person reads at a glance: the summary (buffers, the
-- largest buckets, the stats: a screen whatever the model), or the map (per buffer and bucket one
-- row per shard (rank) with its parameters and padding drawn to scale as a bar, then the stats).
-- Padding is quoted one way throughout: elements, and their percentage of the real elements.
local show = {}

local function commas(n)
   local s = string.format("%d", n)
   local out = s:reverse():gsub("(%d%d%d)", "%1,"):reverse()
   return (out:gsub("^,", ""):gsub("^%-,", "-"))
end

local function percent(x) return string.format("%.2f%%", 100 * x) end

-- "163,840,000 (11.11%)": padding elements and their share of the real elements beside them.
local function padding_text(padding, real)
   return ("%s (%s)"):format(commas(padding), real > 0 and percent(padding / real) or "no real")
end

local PADDING_NOTE = "  padding: elements added to align shards and buckets; % of the real "
   .. "(parameter) elements"

local GLYPHS = { unicode = { "█", "▓", "░" }, ascii = { "#", "=", "." } }

-- A bar of `width` cells for the range [lo, hi): each cell shows the parameter that covers its
-- middle, consecutive parameters alternating between two glyphs; padding is the third glyph.
local function bar(spans, lo, hi, width, glyphs, stop)
   local cells = {}
   local j = 1
   for c = 0, width - 1 do
      local mid = lo + (c + 0.5) * (hi - lo) / width
      while j <= #spans and spans[j].stop <= mid do j = j + 1 end
      local s = spans[j]
      if stop and mid >= stop then -- past a shorter shard (packed): nothing there, not padding
         cells[c + 1] = " "
      elseif s and s.start <= mid then
         cells[c + 1] = glyphs[(s.index % 2) + 1]
      else
         cells[c + 1] = glyphs[3]
      end
   end
   return table.concat(cells)
end

-- Short names: drop the trailing ".weight" that nearly every matrix has.
local function short(name) return (name:gsub("%.weight$", "")) end

local function names_in(spans, lo, hi, room)
   local names = {}
   for _, s in ipairs(spans) do
      if s.start < hi and s.stop > lo then names[#names + 1] = short(s.name) end
   end
   local text, shown = "", 0
   for i, n in ipairs(names) do
      local more = #names - i
      local piece = (i > 1 and ", " or "") .. n
      local tail = more > 0 and (" +" .. more .. " more") or ""
      if #text + #piece + #tail > room and shown > 0 then
         return text .. " +" .. (#names - shown) .. " more"
      end
      text = text .. piece
      shown = shown + 1
   end
   return text
end

local function rank_label(r, dp)
   return string.format("r%-" .. #tostring(dp - 1) .. "d", r)
end

local function show_bucket(lines, self, buffer, k, bucket, opts)
   local spans = {}
   for _, name in ipairs(bucket.params) do
      local p = self._by_name[name]
      spans[#spans + 1] = { start = p.start, stop = p.stop, name = name, owner = p.owner }
   end
   table.sort(spans, function(a, b) return a.start < b.start end)
   for i, s in ipairs(spans) do s.index = i end
   local size = bucket.stop - bucket.start
   -- the shards: equal ones (or one for an unsharded bucket), or the packed layout's own
   local rows = bucket.shards and #bucket.shards or size / bucket.shard_size
   local shape = bucket.shards and ("%d shards up to %s"):format(rows, commas(bucket.shard_size))
      or ("%d x %s"):format(rows, commas(bucket.shard_size))
   lines[#lines + 1] = string.format("  bucket %d  [%s, %s)  %s  real %s  padding %s", k,
      commas(bucket.start), commas(bucket.stop), shape,
      commas(bucket.numel_unpadded), padding_text(size - bucket.numel_unpadded,
      bucket.numel_unpadded))
   for r = 0, rows - 1 do
      local lo = bucket.shards and bucket.shards[r + 1].start
         or bucket.start + r * bucket.shard_size
      local hi = bucket.shards and lo + bucket.shards[r + 1].count or lo + bucket.shard_size
      local real = 0
      for _, s in ipairs(spans) do
         local a, b = math.max(s.start, lo), math.min(s.stop, hi)
         if b > a then real = real + (b - a) end
      end
      local head = rows > 1 and rank_label(r, buffer.dp) or "all"
      -- unequal shards are drawn to one scale, the largest shard's
      local bar_text = bucket.shards and bar(spans, lo, lo + bucket.shard_size, opts.width,
         opts.glyphs, hi) or bar(spans, lo, hi, opts.width, opts.glyphs)
      local prefix = string.format("    %s |%s| %s", head, bar_text, commas(real))
      local prefix_width = 4 + #head + 2 + opts.width + 2 + #commas(real)
      lines[#lines + 1] = prefix .. "  "
         .. names_in(spans, lo, hi, math.max(20, opts.columns - prefix_width - 2))
   end
end

local function show_stats(lines, self)
   local s = self:stats()
   lines[#lines + 1] = "stats"
   lines[#lines + 1] = string.format("  %d params, %s elements in buffers of %s: padding %s",
      s.params, commas(s.numel), commas(s.buffer_numel), padding_text(s.padding, s.numel))
   lines[#lines + 1] = string.format("  muon: %s elements, padding %s",
      commas(s.muon_numel), padding_text(s.muon_padding, s.muon_numel))
   local lo, hi = math.huge, 0
   for _, n in ipairs(s.rank_numel) do lo, hi = math.min(lo, n), math.max(hi, n) end
   lines[#lines + 1] = string.format("  muon numel per rank: min %s, max %s, imbalance %.3f",
      commas(lo), commas(hi), s.numel_imbalance)
   lines[#lines + 1] = string.format(
      "  muon Newton-Schulz cost per rank: imbalance %.3f (lower bound %.3f)",
      s.cost_imbalance, s.cost_imbalance_bound)
end

local function header(self)
   return string.format("layout  dp %d  expert_dp %d  algorithm %s  adamw %s  bucket_size %s"
      .. "%s  hash %s", self.dp, self.expert_dp, self.algorithm, self.adamw_layout,
      self.bucket_size and commas(self.bucket_size) or "none",
      self.high_busbw and "  high_busbw" or "", self:hash())
end

local function buffer_line(b, buffer)
   local real = 0
   for _, bucket in ipairs(buffer.buckets) do real = real + bucket.numel_unpadded end
   return string.format("buffer %d  %s%s  %s/%s  %s  dp %d  %s elements  real %s  padding %s  "
      .. "%d bucket%s", b, buffer.key.optimizer, buffer.key.expert and " expert" or "",
      buffer.key.param_dtype, buffer.key.grad_dtype, buffer.algorithm, buffer.dp,
      commas(buffer.numel), commas(real), padding_text(buffer.numel - real, real),
      #buffer.buckets, #buffer.buckets == 1 and "" or "s")
end

-- layout:summary{ top = 3, more = nil }: the header, a line per buffer, the `top` largest
-- buckets (by elements, padding included; `more`: a note after their count) and the stats,
-- without the per-rank rows.
function show.summary(self, opts)
   opts = opts or {}
   local top = opts.top or 3
   local lines = { header(self), PADDING_NOTE }
   local all = {}
   for b, buffer in ipairs(self.buffers) do
      lines[#lines + 1] = buffer_line(b, buffer)
      for k, bucket in ipairs(buffer.buckets) do
         all[#all + 1] = { b = b, k = k, bucket = bucket, size = bucket.stop - bucket.start }
      end
   end
   table.sort(all, function(x, y)
      if x.size ~= y.size then return x.size > y.size end
      return x.b < y.b or (x.b == y.b and x.k < y.k)
   end)
   lines[#lines + 1] = ("largest buckets (%d of %d%s)"):format(math.min(top, #all), #all,
      opts.more and ("; " .. opts.more) or "")
   for i = 1, math.min(top, #all) do
      local e, bucket = all[i], all[i].bucket
      local shape = bucket.shards and ("%d shards up to %s"):format(#bucket.shards,
         commas(bucket.shard_size)) or ("%d x %s"):format(e.size / bucket.shard_size,
         commas(bucket.shard_size))
      lines[#lines + 1] = string.format("  buffer %d bucket %d  %d param%s  %s  real %s  "
         .. "padding %s", e.b, e.k, #bucket.params, #bucket.params == 1 and "" or "s", shape,
         commas(bucket.numel_unpadded), padding_text(e.size - bucket.numel_unpadded, bucket.numel_unpadded))
   end
   show_stats(lines, self)
   return table.concat(lines, "\n")
end

-- layout:show{ width = 40, ascii = false, columns = 100 }
function show.show(self, opts)
   opts = opts or {}
   local o = {
      width = opts.width or 40,
      glyphs = opts.ascii and GLYPHS.ascii or GLYPHS.unicode,
      columns = opts.columns or 100,
   }
   local lines = { header(self) }
   lines[2] = string.format("  legend: %s %s parameters (alternating), %s padding",
      o.glyphs[1], o.glyphs[2], o.glyphs[3])
   lines[3] = PADDING_NOTE
   for b, buffer in ipairs(self.buffers) do
      lines[#lines + 1] = buffer_line(b, buffer)
      for k, bucket in ipairs(buffer.buckets) do show_bucket(lines, self, buffer, k, bucket, o) end
   end
   show_stats(lines, self)
   return table.concat(lines, "\n")
end

return show
