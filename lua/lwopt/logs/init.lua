-- logs/init.lua: reading the JSON-lines logs that training writes (--log; logs/writer.lua):
-- each run's configuration and step records, a run's final figures, several runs compared in a
-- table or CSV, a run's steps as CSV, and the loss chart (plot.lua, also the loss curve a recipe
-- draws at its end). The commands over them (`lwopt plot`, `compare`, `csv`) are
-- app/cli_logs.lua's. It never writes a log.
local json = require("lwopt.json")
local errors = require("lwopt.errors")
local plotter = require("lwopt.logs.plot")

local logs = {}

-- A record's field as a number: nil when absent, null (a non-finite value in the log) or not a
-- number.
local function number(x) return type(x) == "number" and x or nil end

-- The name a run goes by: its file name without the directory and .jsonl (or .json, .log).
local function base_name(path)
   local name = path:match("([^/]*)$")
   return (name:gsub("%.jsonl$", ""):gsub("%.json$", ""):gsub("%.log$", ""))
end

-- Reads the log at path: { path, name, configs (each run's configuration record, in file
-- order), steps (one record per step, the last one logged for it: a resumed run redoes the
-- steps after its checkpoint; in step order), segments ({ config, steps } for each run that
-- appended to the file, the records before any config in one of their own), segment_of (each
-- step record's segment) }. Lines that are neither are passed over. Raises naming the file
-- (and the line) when it cannot be read or a line is not a JSON object.
function logs.read(path)
   local f, err = io.open(path, "r")
   if f == nil then errors.fail(nil, "cannot read %s", err) end
   local log = { path = path, name = base_name(path), configs = {}, steps = {}, segments = {},
                 segment_of = {} }
   local by_step, segment = {}, nil
   local n = 0
   for line in f:lines() do
      n = n + 1
      if line:find("%S") then
         local ok, rec = pcall(json.decode, line)
         if not ok or type(rec) ~= "table" or getmetatable(rec) == getmetatable(json.array()) then
            f:close()
            errors.fail(nil, "%s:%d: not a JSON record (%s)", path, n, ok and "not an object"
               or tostring(rec))
         end
         if rec.kind == "config" then
            log.configs[#log.configs + 1] = rec
            segment = { config = rec, steps = {} }
            log.segments[#log.segments + 1] = segment
         elseif number(rec.step) then
            if segment == nil then
               segment = { steps = {} }
               log.segments[#log.segments + 1] = segment
            end
            segment.steps[#segment.steps + 1] = rec
            log.segment_of[rec] = segment
            if by_step[rec.step] == nil then log.steps[#log.steps + 1] = rec.step end
            by_step[rec.step] = rec
         end
      end
   end
   f:close()
   table.sort(log.steps)
   for i, step in ipairs(log.steps) do log.steps[i] = by_step[step] end
   return log
end

-- The tokens trained on through a step record: its own "tokens", else its run's configuration
-- record's tokens per step times the step; nil when neither says.
local function tokens_of(log, rec)
   if number(rec.tokens) then return rec.tokens end
   local config = log.segment_of[rec].config
   local per = config and number(config.tokens_per_step)
   return per and per * rec.step or nil
end

local function median(list)
   if #list == 0 then return nil end
   local t = {}
   for i, x in ipairs(list) do t[i] = x end -- unpack stops at a few thousand values
   table.sort(t)
   local k = #t
   return k % 2 == 1 and t[(k + 1) / 2] or (t[k / 2] + t[k / 2 + 1]) / 2
end

-- The largest number in a per-rank list (memory_mb's fields), or nil.
local function most(list)
   local m
   if type(list) == "table" then
      for _, x in ipairs(list) do
         if number(x) then m = math.max(m or x, x) end
      end
   end
   return m
end

-- A run's final figures: { name, path, steps (the last step), tokens (through it), loss (its
-- training loss), val_loss (the last validation loss logged), tokens_per_s (median over the
-- steps), peak_mb (the largest peak of any rank at any step: parameters, gradients, optimizer
-- state and activations), gpu_mb (the same of the GPU's memory in use, on a GPU), wall_s (each
-- run's time from its start to its last step record, summed over the runs that appended to the
-- log; nil without configuration records) }. Absent figures are nil.
function logs.summary(log)
   local s = { name = log.name, path = log.path }
   local last = log.steps[#log.steps]
   if last == nil then return s end
   s.steps, s.loss, s.tokens = last.step, number(last.loss), tokens_of(log, last)
   local rates = {}
   for _, rec in ipairs(log.steps) do
      if number(rec.val_loss) then s.val_loss = rec.val_loss end
      if number(rec.tokens_per_s) then rates[#rates + 1] = rec.tokens_per_s end
      local mem = type(rec.memory_mb) == "table" and rec.memory_mb or {}
      local peak, gpu = most(mem.peak), most(mem.gpu)
      if peak then s.peak_mb = math.max(s.peak_mb or peak, peak) end
      if gpu then s.gpu_mb = math.max(s.gpu_mb or gpu, gpu) end
   end
   s.tokens_per_s = median(rates)
   for _, segment in ipairs(log.segments) do
      local start = segment.config and number(segment.config.start_wall_time)
      local final = segment.steps[#segment.steps]
      if start and final and number(final.wall_time) then
         s.wall_s = (s.wall_s or 0) + final.wall_time - start
      end
   end
   return s
end

-- Distinct names for the runs: each file's name, or where two share one, the run id of their
-- configuration records when those differ, else the path as given.
local function name_runs(list)
   local count = {}
   for _, log in ipairs(list) do count[log.name] = (count[log.name] or 0) + 1 end
   local ids = {}
   for _, log in ipairs(list) do
      local c = log.configs[1]
      local id = c and type(c.run_id) == "string" and c.run_id or nil
      log.run_id = id
      if id then ids[id] = (ids[id] or 0) + 1 end
   end
   for _, log in ipairs(list) do
      if count[log.name] > 1 then
         log.name = (log.run_id and ids[log.run_id] == 1) and log.run_id or log.path
      end
   end
end

-- Reads every path (logs.read), named for a chart or table (name_runs).
function logs.read_all(paths)
   local list = {}
   for i, path in ipairs(paths) do list[i] = logs.read(path) end
   name_runs(list)
   return list
end

local COLUMNS = {
   { "run", "name" }, { "steps", "steps", "%d" }, { "tokens", "tokens", "%d" },
   { "final loss", "loss", "%.4f" }, { "final val", "val_loss", "%.4f" },
   { "tokens/s", "tokens_per_s", "%.0f" }, { "peak MiB", "peak_mb", "%.1f" },
   { "gpu MiB", "gpu_mb", "%.1f" }, { "wall s", "wall_s", "%.1f" },
}

-- The summaries (logs.summary) as a table with a header, one run a line; "-" where a figure is
-- absent; the GPU's column only when a run has it.
function logs.compare_table(summaries)
   local gpu = false
   for _, s in ipairs(summaries) do gpu = gpu or s.gpu_mb ~= nil end
   local columns = {}
   for _, c in ipairs(COLUMNS) do
      if c[2] ~= "gpu_mb" or gpu then columns[#columns + 1] = c end
   end
   local rows = { {} }
   for j, c in ipairs(columns) do rows[1][j] = c[1] end
   for i, s in ipairs(summaries) do
      local row = {}
      for j, c in ipairs(columns) do
         local x = s[c[2]]
         row[j] = x == nil and "-" or c[3] and c[3]:format(x) or tostring(x)
      end
      rows[i + 1] = row
   end
   local widths = {}
   for _, row in ipairs(rows) do
      for j, cell in ipairs(row) do widths[j] = math.max(widths[j] or 0, #cell) end
   end
   local lines = {}
   for i, row in ipairs(rows) do
      local cells = {}
      for j, cell in ipairs(row) do
         -- the run's name to the left, the figures to the right
         local pad = (" "):rep(widths[j] - #cell)
         cells[j] = j == 1 and cell .. pad or pad .. cell
      end
      lines[i] = table.concat(cells, "  "):gsub("%s+$", "")
   end
   return table.concat(lines, "\n")
end

-- A CSV cell: numbers in the shortest form that reads back exactly (json's), true/false, text
-- quoted when it holds a comma, quote or line break; nil and null empty.
local function csv_cell(x)
   if x == nil or x == json.null then return "" end
   if type(x) == "number" then
      local text = json.encode(x)
      return text == "null" and "" or text
   end
   x = tostring(x)
   if x:find('[,"\r\n]') then return '"' .. x:gsub('"', '""') .. '"' end
   return x
end

local function csv_text(header, rows)
   local lines = { table.concat(header, ",") }
   for _, row in ipairs(rows) do
      local cells = {}
      for j = 1, #header do cells[j] = csv_cell(row[j]) end
      lines[#lines + 1] = table.concat(cells, ",")
   end
   return table.concat(lines, "\n") .. "\n"
end

local SUMMARY_FIELDS = { "name", "path", "steps", "tokens", "loss", "val_loss", "tokens_per_s",
   "peak_mb", "gpu_mb", "wall_s" }
local SUMMARY_HEADER = { "run", "path", "steps", "tokens", "final_loss", "final_val_loss",
   "tokens_per_s_median", "peak_mb", "gpu_mb", "wall_s" }

-- Each record's values of keys, in that order: the rows of a CSV.
local function rows_of(records, keys)
   local rows = {}
   for i, fields in ipairs(records) do
      local row = {}
      for j, k in ipairs(keys) do row[j] = fields[k] end
      rows[i] = row
   end
   return rows
end

-- The summaries as CSV: a header, then one run a row.
function logs.compare_csv(summaries)
   return csv_text(SUMMARY_HEADER, rows_of(summaries, SUMMARY_FIELDS))
end

-- The columns that lead, in this order, when a log has them; the others follow by name.
local LEADING = { "step", "wall_time", "tokens", "loss", "val_loss", "lr", "grad_norm",
   "tokens_per_s" }

-- A step record's flat fields: its numbers, strings and booleans by name, and those of the
-- objects in it by "object.field" (time_ms.fwd, comm_mb_by_op.allgather); lists (the per-rank
-- figures, expert counts) and the record's kind are left out.
local function flat_fields(rec)
   local out = {}
   local array_mt = getmetatable(json.array())
   for k, x in pairs(rec) do
      if type(x) == "table" and x ~= json.null then
         if getmetatable(x) ~= array_mt then
            for k2, x2 in pairs(x) do
               if type(x2) ~= "table" then out[k .. "." .. k2] = x2 end
            end
         end
      elseif k ~= "kind" then
         out[k] = x
      end
   end
   return out
end

-- A log's step records (logs.read's steps) as CSV: a header of every flat field any record has
-- (LEADING first, the rest sorted; tokens from the configuration record when the steps lack
-- them), then one row per step.
function logs.csv(log)
   local rows, seen = {}, {}
   for i, rec in ipairs(log.steps) do
      local fields = flat_fields(rec)
      fields.tokens = fields.tokens or tokens_of(log, rec)
      for k in pairs(fields) do seen[k] = true end
      rows[i] = fields
   end
   local header, rest = {}, {}
   for _, k in ipairs(LEADING) do
      if seen[k] then
         header[#header + 1] = k
         seen[k] = nil
      end
   end
   for k in pairs(seen) do rest[#rest + 1] = k end
   table.sort(rest)
   for _, k in ipairs(rest) do header[#header + 1] = k end
   return csv_text(header, rows_of(rows, header))
end

-- Draws the runs (logs.read's tables, named: logs.read_all) on one chart with gnuplot: training
-- loss as lines and validation loss as dashed points against opts.x ("step", default, or "tokens"),
-- one colour per run, a legend by run name, a title naming them. opts: out (the PNG), data
-- (gnuplot's table of points; default beside out, .dat for .png), keep_data (leave the table there;
-- default removed), unit ("byte" | "token": the y axis's; default the runs' configuration's), y
-- ("loss", default, or "max-logit": instead each step's largest attention logit over the layers,
-- the step records' max_logit, a line per run). Returns out, or nil and why not (gnuplot missing,
-- failing, or a PNG cut short). The chart is plot.lua's.
function logs.plot(list, opts) return plotter.plot(list, opts, tokens_of) end

return logs
