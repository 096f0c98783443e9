-- recipe_paths.lua: the files a run of recipes/gpt_small.lua reads and writes (beside
-- recipe.lua), compared by real path before step 1, so that no output (--log, the loss
-- curve beside it, --save-params, the checkpoints in --ckpt-dir) writes over an input (--data's
-- and --val-data's files, the checkpoint resumed) or over another output: symbolic links, hard
-- links and other spellings of a path are seen through; and where the default corpus is.
local files = require("lwopt.files")
local checkpoint = require("lwopt.checkpoint")

local paths = {}

-- The lwopt tree these modules were loaded from (the folder holding lua/lwopt/, recipes/ and
-- data/: "." or "recipes/.." or "/opt/lwopt/bin/.."), or nil for modules installed under
-- share/lua/5.1, which is no tree.
function paths.tree(source)
   source = source or debug.getinfo(1, "S").source
   -- this module is in lua/lwopt/app/; a module of lua/lwopt/ itself names the same tree
   source = source:gsub("(lua/lwopt)/app/([^/]+)$", "%1/%2")
   if source:match("^@lua/lwopt/[^/]+$") then return "." end
   return source:match("^@(.+)/lua/lwopt/[^/]+$")
end

local function exists(path)
   local f = io.open(path, "r")
   if f then f:close() end
   return f ~= nil
end

-- The corpus a recipe trains on without --data: data/kjv.txt of the lwopt tree running it (so
-- that a recipe copied out of recipes/ finds it too), else data/ beside the recipe's folder
-- (script: the recipe's path), the first that exists; when neither does, the first of them,
-- for the message that says to run `make data`.
function paths.default_data(script)
   local candidates, tree = {}, paths.tree()
   if tree then candidates[1] = tree .. "/data/kjv.txt" end
   local here = (script or ""):match("^(.*)/[^/]*$") or "."
   candidates[#candidates + 1] = here .. "/../data/kjv.txt"
   for _, path in ipairs(candidates) do
      if exists(path) then return path end
   end
   return candidates[1]
end

-- The loss curve's path for a log path.
function paths.plot(log) return (log:gsub("%.jsonl$", "")) .. ".png" end

-- The table of points gnuplot reads while it draws the loss curve, beside it.
function paths.plot_data(log) return (paths.plot(log):gsub("%.png$", "")) .. ".dat" end

-- The files the run writes: { { what, path, of } } (--log and what goes beside it, --save-params
-- and the temporary file it is written to first; of: the flag a file comes from, when it is not
-- the flag's own path).
function paths.outputs(v)
   local out = {}
   if v.log then
      local beside = ("beside --log '%s'"):format(v.log)
      out[#out + 1] = { what = "--log", path = v.log }
      out[#out + 1] = { what = "the loss curve", path = paths.plot(v.log), of = beside }
      out[#out + 1] = { what = "the loss curve's table", path = paths.plot_data(v.log),
                        of = beside }
   end
   if v.save_params then
      out[#out + 1] = { what = "--save-params", path = v.save_params }
      out[#out + 1] = { what = "the temporary file", path = v.save_params .. ".tmp",
                        of = ("of --save-params '%s'"):format(v.save_params) }
   end
   return out
end

-- An entry of outputs or inputs in a message: "--log 'x.jsonl'", "the loss curve 'x.png'
-- (beside --log 'x.jsonl')".
local function named(e)
   return ("%s '%s'%s"):format(e.what, e.path, e.of and (" (" .. e.of .. ")") or "")
end

-- The files the run reads: { { what, path } } (a text file, or the training and validation
-- shards of token data; --init-from's file unless the run resumed a checkpoint instead).
function paths.inputs(data, v, resumed)
   local out = {}
   if v.init_from and not resumed then
      out[#out + 1] = { what = "--init-from", path = v.init_from }
   end
   if data.kind ~= "tokens" then
      out[#out + 1] = { what = "--data", path = data.path }
      return out
   end
   for _, p in ipairs(data.train.paths) do out[#out + 1] = { what = "--data", path = p } end
   for _, p in ipairs(data.val and data.val.paths or {}) do
      out[#out + 1] = { what = v.val_data and "--val-data" or "a validation shard", path = p }
   end
   return out
end

local function with_real(list)
   for _, entry in ipairs(list) do entry.real = files.real_path(entry.path) end
   return list
end

local function same(a, b) return a.real == b.real or files.same_file(a.path, b.path) end

-- The part of path below dir ("a/b" for dir/a/b), or nil when it is not below dir.
local function below(path, dir)
   if path:sub(1, #dir + 1) == dir .. "/" then return path:sub(#dir + 2) end
   return nil
end

-- nil when no output of the run writes over one of its inputs or another output; else one line
-- naming both paths. data: lw.data's or lw.tokens's dataset; resumed: the checkpoint directory
-- the run resumed from, or nil.
function paths.check(v, data, resumed)
   local outputs = with_real(paths.outputs(v))
   local inputs = with_real(paths.inputs(data, v, resumed ~= nil))
   for i, o in ipairs(outputs) do
      for _, other in ipairs(inputs) do
         if same(o, other) then
            return ("%s is the same file as %s: writing it would destroy the run's input; "
               .. "choose another path"):format(named(o), named(other))
         end
      end
      for j = 1, i - 1 do
         if same(o, outputs[j]) then
            return ("%s is the same file as %s: one output would destroy the other; choose "
               .. "another path"):format(named(o), named(outputs[j]))
         end
      end
      if resumed and below(o.real, files.real_path(resumed)) then
         return ("%s is inside the checkpoint being resumed, '%s': writing it would destroy the "
            .. "run's input; choose another path"):format(named(o), resumed)
      end
   end
   if v.ckpt_dir then
      local dir = files.real_path(v.ckpt_dir)
      for _, list in ipairs({ inputs, outputs }) do
         for _, entry in ipairs(list) do
            local rest = below(entry.real, dir)
            if rest and checkpoint.writes_name(rest:match("^[^/]*")) then
               return ("%s is where --ckpt-dir '%s' keeps its checkpoints (latest, step-N): "
                  .. "writing them would destroy %s; choose another path"):format(named(entry),
                  v.ckpt_dir, list == inputs and "the run's input" or entry.what)
            end
         end
      end
   end
   return nil
end

return paths
