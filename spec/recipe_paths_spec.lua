-- recipe_paths_spec.lua: the recipe's outputs against its inputs and each other
-- (lua/lwopt/app/recipe_paths.lua), by real path: spellings, symbolic links, hard links, files
-- that do not exist yet, the checkpoint directory's own names, the checkpoint resumed.
local paths = require("lwopt.app.recipe_paths")
local helpers = require("helpers")

describe("lwopt.recipe_paths", function()
   local dir, corpus
   before_each(function()
      dir = helpers.fresh_path()
      corpus = dir .. "/d/corpus.txt"
      helpers.sh(("mkdir -p %s/d && echo text > %s && ln -s %s/d %s/link && ln %s %s/hard")
         :format(dir, corpus, dir, dir, corpus, dir))
   end)
   after_each(function() helpers.sh("rm -rf " .. dir) end)

   local function check(v, resumed)
      v.data = v.data or corpus
      return paths.check(v, { kind = "bytes", path = v.data }, resumed)
   end

   it("finds the lwopt tree its modules came from, and the default corpus in it", function()
      assert.equal(".", paths.tree("@lua/lwopt/recipe_paths.lua"))
      assert.equal("recipes/..", paths.tree("@recipes/../lua/lwopt/recipe_paths.lua"))
      assert.equal("/opt/lw/bin/..", paths.tree("@/opt/lw/bin/../lua/lwopt/recipe_paths.lua"))
      assert.is_nil(paths.tree("@/usr/local/share/lua/5.1/lwopt/recipe_paths.lua"))
      -- the specs load lua/lwopt/ of this tree: its data/kjv.txt (make data), wherever the
      -- recipe is; the recipe's own ../data/ when the tree has none is the fallback
      local root = paths.tree()
      assert.is_not_nil(root)
      assert.equal(root .. "/data/kjv.txt", paths.default_data("/elsewhere/r.lua"))
      assert.equal(root .. "/data/kjv.txt", paths.default_data("r.lua"))
   end)

   it("names the files beside the log and the parameters", function()
      assert.equal("run.png", paths.plot("run.jsonl"))
      assert.equal("run.log.png", paths.plot("run.log"))
      assert.equal("run.dat", paths.plot_data("run.jsonl"))
      local outputs = paths.outputs({ log = "l.jsonl", save_params = "p.st" })
      local names = {}
      for _, o in ipairs(outputs) do names[#names + 1] = o.path end
      assert.same({ "l.jsonl", "l.png", "l.dat", "p.st", "p.st.tmp" }, names)
   end)

   it("counts --init-from's file among the inputs, unless a resumed checkpoint replaces it",
      function()
      local w = dir .. "/d/w.safetensors"
      helpers.sh("touch " .. w)
      assert.equal(("--save-params '%s/link/w.safetensors' is the same file as --init-from '%s': "
         .. "writing it would destroy the run's input; choose another path"):format(dir, w),
         check({ init_from = w, save_params = dir .. "/link/w.safetensors" }))
      assert.is_nil(check({ init_from = w, save_params = w, ckpt_dir = dir .. "/ck" },
         dir .. "/ck/step-000000001"))
   end)

   it("passes distinct files, missing ones included", function()
      assert.is_nil(check({ log = dir .. "/new/run.jsonl", save_params = dir .. "/p.st",
         ckpt_dir = dir .. "/ck" }))
   end)

   it("finds an output over the data however the path reaches it", function()
      for _, out in ipairs({ corpus, dir .. "/d/../d/corpus.txt", dir .. "/link/corpus.txt",
         dir .. "/hard" }) do
         assert.equal(("--save-params '%s' is the same file as --data '%s': writing it would "
            .. "destroy the run's input; choose another path"):format(out, corpus),
            check({ save_params = out }))
      end
      assert.matches("^the loss curve's table '" .. dir:gsub("%p", "%%%0") .. "/d/corpus%.dat' "
         .. "%(beside %-%-log '" .. dir:gsub("%p", "%%%0") .. "/d/corpus%.jsonl'%) is the same "
         .. "file as %-%-data", check({ data = dir .. "/d/corpus.dat",
         log = dir .. "/d/corpus.jsonl" }) or "")
      -- the loss curve over the data: the PNG named as the curve's, --log as --log's
      assert.equal(("the loss curve '%s/d/corpus.png' (beside --log '%s/d/corpus.jsonl') is the "
         .. "same file as --data '%s/d/corpus.png': writing it would destroy the run's input; "
         .. "choose another path"):format(dir, dir, dir),
         check({ data = dir .. "/d/corpus.png", log = dir .. "/d/corpus.jsonl" }))
   end)

   it("finds two outputs on one path, even where nothing is yet", function()
      assert.equal(("--save-params '%s/link/x' is the same file as --log '%s/d/x': one output "
         .. "would destroy the other; choose another path"):format(dir, dir),
         check({ log = dir .. "/d/x", save_params = dir .. "/link/x" }))
   end)

   it("keeps outputs out of the checkpoint resumed and off the checkpoint directory's names",
      function()
      assert.equal(("--log '%s/ck/step-000000004/l.jsonl' is inside the checkpoint being "
         .. "resumed, '%s/ck/step-000000004': writing it would destroy the run's input; choose "
         .. "another path"):format(dir, dir),
         check({ log = dir .. "/ck/step-000000004/l.jsonl" }, dir .. "/ck/step-000000004"))
      assert.matches("is where --ckpt-dir '" .. dir .. "/d' keeps its checkpoints (latest, "
         .. "step-N): writing them would destroy --save-params",
         check({ ckpt_dir = dir .. "/d", save_params = dir .. "/d/step-000000002.tmp" }) or "",
         1, true)
      assert.is_nil(check({ ckpt_dir = dir .. "/d", save_params = dir .. "/d/final.st" }))
   end)
end)
