-- checkpoint/find.lua: which checkpoint a resume takes in a directory (lw.checkpoint.find): the
-- one `latest` names when it is whole (its files' sizes and checksums as its manifest says);
-- otherwise, unless the resume is strict, the newest whole checkpoint of the same run: the run
-- of `latest`'s checkpoint, or, when `latest` is missing or unreadable, the run of the newest
-- manifest (the last saved). Checkpoints of other runs are never taken; the note says which it
-- passed over and whose they are.
local files = require("lwopt.files")
local errors = require("lwopt.errors")

local finder = {}

local fail = errors.failer("checkpoint")

-- A checkpoint's run id, nil for format 1 (which has none).
local function run_of(c)
   local id = c.manifest.run_id
   return type(id) == "string" and id or nil
end

local function run_name(id) return id and ("run " .. id) or "the checkpoints without a run id" end

-- Whether a was saved after b: by the time of the save (saved_at), then by step (format 1 and
-- checkpoints saved before saved_at existed count as older than any that has one).
local function newer(a, b)
   local ta, tb = a.manifest.saved_at or -math.huge, b.manifest.saved_at or -math.huge
   if ta ~= tb then return ta > tb end
   return a.step > b.step
end

-- nil when a listed checkpoint is whole, else why not (checkpoint.read_manifest's message).
local function damage(ck, c)
   local ok, err = pcall(ck.read_manifest, c.path)
   return (not ok) and tostring(err) or nil
end

-- "; passed over: step-000000010, step-000000020 of run b2 (another run)", or "".
local function passed_over(others)
   if #others == 0 then return "" end
   local order, by_run = {}, {}
   for _, c in ipairs(others) do
      local key = run_of(c) or ""
      if by_run[key] == nil then
         by_run[key] = {}
         order[#order + 1] = key
      end
      table.insert(by_run[key], c.name)
   end
   local parts = {}
   for _, key in ipairs(order) do
      parts[#parts + 1] = ("%s of %s"):format(table.concat(by_run[key], ", "),
         run_name(key ~= "" and key or nil))
   end
   return "; passed over, another run's: " .. table.concat(parts, "; ")
end

-- Why the checkpoint `latest` names cannot be taken, or nil with that checkpoint when it can.
local function latest_problem(ck, dir, found)
   local ok, name = pcall(ck.latest_name, dir)
   if not ok then return (tostring(name):gsub("^checkpoint: ", "")) end
   if name == nil then return dir .. "/latest is missing" end
   for _, c in ipairs(found) do
      if c.name == name then
         local bad = damage(ck, c)
         if bad == nil then return nil, c end
         return ("%s/latest names %s, which is damaged (%s)"):format(dir, name, bad), nil, c
      end
   end
   for _, b in ipairs(found.broken) do
      if b.name == name then
         return ("%s/latest names %s, which is damaged (%s)"):format(dir, name, b.reason)
      end
   end
   return ("%s/latest names %s, which is missing"):format(dir, name)
end

-- find(dir, { strict }, ck): { path, step, manifest, note } (note: why it is not the one
-- `latest` names, and what was passed over), or nil and the reason when dir holds nothing to
-- resume. ck: init.lua's list, latest_name and read_manifest. Raises when `latest`'s
-- checkpoint cannot be taken and strict is set, or when its run has no whole checkpoint left.
function finder.find(dir, opts, ck)
   local kind = files.kind(dir)
   if kind == "missing" then return nil, dir .. " does not exist" end
   if kind ~= "dir" then fail("%s is not a directory", dir) end
   local found = ck.list(dir)
   local why, whole, named = latest_problem(ck, dir, found)
   if whole then return { path = whole.path, step = whole.step, manifest = whole.manifest } end
   if why == dir .. "/latest is missing" and #found == 0 then
      return nil, dir .. " holds no checkpoint"
   end
   if opts and opts.strict then
      fail("%s; a strict resume takes only the checkpoint latest names", why)
   end
   local source, whose = named, "its run"
   if source == nil then
      for _, c in ipairs(found) do
         if source == nil or newer(c, source) then source = c end
      end
      whose = "the run of the newest manifest"
   end
   if source == nil then
      fail("%s, and %s holds no other checkpoint", why, dir)
   end
   local run = run_of(source)
   local mine, others = {}, {}
   for _, c in ipairs(found) do
      if c ~= named then
         if run_of(c) == run then mine[#mine + 1] = c else others[#others + 1] = c end
      end
   end
   table.sort(mine, newer)
   local damaged = {}
   for _, c in ipairs(mine) do
      local bad = damage(ck, c)
      if bad == nil then
         return { path = c.path, step = c.step, manifest = c.manifest,
            note = ("%s; using %s, the newest whole checkpoint of %s (%s)%s%s"):format(why,
               c.name, whose, run_name(run), #damaged > 0 and ("; also damaged: "
               .. table.concat(damaged, ", ")) or "", passed_over(others)) }
      end
      damaged[#damaged + 1] = c.name
   end
   fail("%s, and %s (%s) has no other whole checkpoint in %s%s (point %s/latest at a "
      .. "checkpoint to resume it)", why, whose, run_name(run), dir, passed_over(others), dir)
end

return finder
