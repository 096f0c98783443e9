-- ep.lua: expert parallelism's communicators (docs/algorithms.md section 10). The world of W ranks
-- splits into W/E EP groups of E consecutive ranks (world rank r is in EP group floor(r / E), at EP
-- rank r % E) and E expert-data-parallel groups (the ranks with the same EP rank, r % E, at
-- expert-DP rank floor(r / E)). EP rank j holds experts [j * n/E, (j + 1) * n/E) of every layer;
-- the tokens move between the ranks of one EP group (nn.MoE), the experts' gradients are averaged
-- over one expert-DP group (lw.ddp.new's expert_comm), the dense parameters over the world.
local errors = require("lwopt.errors")

local ep = {}

local function is_count(v) return type(v) == "number" and v == math.floor(v) and v >= 1 end

-- Refuses an EP size that does not divide the world or the experts, naming the numbers; nil
-- when it is good. Needs no communicator (the recipe checks before any work).
function ep.check(e, world, n_expert)
   if not is_count(e) then return ("ep (%s) must be a positive integer"):format(tostring(e)) end
   if world % e ~= 0 then
      return ("ep %d does not divide the %d rank%s (the world splits into groups of ep ranks)")
         :format(e, world, world == 1 and "" or "s")
   end
   if e > 1 and (n_expert or 0) == 0 then
      return ("ep %d needs a mixture of experts (n_expert is 0)"):format(e)
   end
   if n_expert and n_expert > 0 and n_expert % e ~= 0 then
      return ("ep %d does not divide the %d experts (each EP rank holds n_expert / ep of them)")
         :format(e, n_expert)
   end
   return nil
end

-- ep.groups(comm, e, n_expert) -> { size = e, rank (EP rank, r % e), group (floor(r / e)),
-- comm (the EP group's communicator), expert_comm (the expert-DP group's), first, count (this
-- rank's experts: global indices first .. first + count - 1) }. Collective over comm (two
-- comm:split). Errors as ep.check.
function ep.groups(comm, e, n_expert)
   local bad = ep.check(e, comm.size, n_expert)
   if bad then errors.misuse("lw.ep", "%s", bad) end
   local r = comm.rank
   local g = { size = e, rank = r % e, group = math.floor(r / e) }
   g.comm = comm:split(g.group, r)
   g.expert_comm = comm:split(g.rank, r)
   local per = math.floor((n_expert or 0) / e)
   g.first, g.count = g.rank * per, per
   return g
end

-- Appends to tensors (ddp:params_on(0)'s list: rank 0's dense parameters and its experts) the
-- experts of the other EP ranks of rank 0's EP group, as { name, shape, data = float*,
-- optimizer, expert = true } (copies, kept alive by the entries), so rank 0 holds every expert
-- by global name. Collective over the world (ddp:with_param within each expert-DP group at
-- ZeRO-3, then broadcasts within each EP group); tensors is left as it is on other ranks.
function ep.gather_experts(ddp, g, tensors)
   local ffi = require("ffi")
   local parts = {}
   for _, spec in ipairs(ddp.specs) do
      if spec.expert then
         ddp:with_param(spec.name, function(p)
            if g.group == 0 then
               parts[#parts + 1] = ("%s\n%s\n%s\n%d\n"):format(spec.name,
                  table.concat(spec.shape, ","), spec.optimizer or "", 4 * p.numel)
                  .. ffi.string(p.data, 4 * p.numel)
            end
         end)
      end
   end
   local packed = table.concat(parts)
   for root = 1, g.size - 1 do
      local got = g.comm:broadcast_string(packed, root)
      if g.group == 0 and g.rank == 0 then
         local at = 1
         while at <= #got do
            local name, dims, optimizer, len, body =
               got:match("^([^\n]*)\n([^\n]*)\n([^\n]*)\n(%d+)\n()", at)
            len = tonumber(len)
            local shape = {}
            for d in dims:gmatch("%d+") do shape[#shape + 1] = tonumber(d) end
            local data = ffi.new("float[?]", math.max(len / 4, 1))
            ffi.copy(data, got:sub(body, body + len - 1), len)
            tensors[#tensors + 1] = { name = name, shape = shape, data = data,
               optimizer = optimizer ~= "" and optimizer or nil, expert = true }
            at = body + len
         end
      end
   end
   return tensors
end

return ep
