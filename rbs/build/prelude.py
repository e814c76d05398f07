"""Starlark evaluated into every `.rbs` module: the rule API (rule, attr, provider, ctx...).

Starlark functions cannot cross into Python, so `rule()` keeps each implementation in a
module-level dict and Python later calls the exported `rbs_call_impl(rule_id, data)` of
the defining module with plain data. Values that carry methods (depsets, runfiles, Args,
the ctx itself) are built here from plain data and flattened back by `_plain` before
anything returns to Python.
"""

from __future__ import annotations

PRELUDE = r'''
_RULES = {}
_PROVIDERS = {}
_BIN_DIR = "bazel-out/k8-fastbuild/bin"

def _file(d):
    path, short_path, is_source, owner = d["_f"]
    dirname, _, basename = path.rpartition("/")
    ext = basename.rpartition(".")[2] if "." in basename else ""
    return struct(
        _rbs_kind = "file", path = path, short_path = short_path, basename = basename,
        dirname = dirname, extension = ext, is_source = is_source, is_directory = False,
        owner = owner, root = struct(path = "" if is_source else _BIN_DIR),
        _rbs_compact = d,
    )

def _kind(v):
    if type(v) == "struct":
        return getattr(v, "_rbs_kind", "struct")
    return type(v)

def _mkdepset(items):
    def to_list():
        return list(items)
    return struct(_rbs_kind = "depset", _items = items, to_list = to_list)

def _dedupe(items):
    seen = {}
    out = []
    for x in items:
        k = x.path if _kind(x) == "file" else x
        if k not in seen:
            seen[k] = True
            out.append(x)
    return out

def depset(direct = None, order = "default", transitive = None, items = None):
    """A set of values in postorder (transitive parts first, then direct)."""
    out = []
    for t in (transitive or []):
        out.extend(t._items)
    out.extend(direct or items or [])
    return _mkdepset(_dedupe(out))

def _mkrunfiles(files):
    def merge(other):
        return _mkrunfiles(_dedupe(files + other.files.to_list()))
    def merge_all(others):
        acc = list(files)
        for o in others:
            acc.extend(o.files.to_list())
        return _mkrunfiles(_dedupe(acc))
    return struct(_rbs_kind = "runfiles", files = _mkdepset(files), merge = merge, merge_all = merge_all)

def _runfiles(files = [], transitive_files = None, collect_data = False, collect_default = False, symlinks = None, root_symlinks = None):
    acc = list(files)
    if transitive_files != None:
        acc.extend(transitive_files.to_list())
    return _mkrunfiles(_dedupe(acc))

def provider(doc = "", fields = None, init = None):
    """A new provider: call it with keyword fields; read it as target[Provider]."""
    key = _rbs_new_provider(doc = doc)
    def _ctor(**kwargs):
        return struct(_rbs_provider = key, **kwargs)
    _PROVIDERS[key] = _ctor
    return _ctor

def DefaultInfo(files = None, runfiles = None, executable = None, data_runfiles = None, default_runfiles = None):
    rf = runfiles or default_runfiles or _mkrunfiles([])
    return struct(
        _rbs_provider = "DefaultInfo", files = files or depset(), default_runfiles = rf,
        data_runfiles = data_runfiles or rf, executable = executable,
        files_to_run = struct(executable = executable),
    )

_PROVIDERS["DefaultInfo"] = DefaultInfo

def _attr(kind):
    def make(default = None, doc = "", mandatory = False, allow_files = None,
             allow_single_file = None, executable = False, cfg = None, providers = [],
             values = [], allow_empty = True, allow_rules = None, aspects = None):
        return {
            "_attr": kind, "default": default, "doc": doc, "mandatory": mandatory,
            "allow_files": allow_files, "allow_single_file": allow_single_file,
            "executable": executable, "values": values, "allow_empty": allow_empty,
        }
    return make

attr = struct(
    label = _attr("label"), label_list = _attr("label_list"), string = _attr("string"),
    string_list = _attr("string_list"), int = _attr("int"), bool = _attr("bool"),
    string_dict = _attr("string_dict"), output = _attr("output"),
    output_list = _attr("output_list"), int_list = _attr("int_list"),
)

def rule(implementation, attrs = None, executable = False, test = False, doc = "",
         outputs = None, toolchains = None, fragments = None, provides = None,
         output_to_genfiles = False, cfg = None, exec_compatible_with = None):
    """A new rule; its implementation runs at analysis and only declares actions."""
    rid = _rbs_new_rule(attrs = attrs or {}, executable = executable, test = test, doc = doc)
    _RULES[rid] = implementation
    def _instantiate(name, **kwargs):
        _rbs_register_target(rule = rid, name = name, attrs = kwargs, stack = call_stack())
    return _instantiate

def rbs_providers():
    return _PROVIDERS

def _plain(v):
    k = _kind(v)
    if k == "file":
        return v._rbs_compact
    if k == "depset":
        return {"_d": [_plain(x) for x in v._items]}
    if k == "runfiles":
        return {"_r": [_plain(x) for x in v.files._items]}
    if k == "args":
        return {"_a": v._items}
    if k == "struct":
        if hasattr(v, "_rbs_provider"):
            return {"_p": v._rbs_provider, "fields": {n: _plain(getattr(v, n)) for n in dir(v) if n != "_rbs_provider" and n != "files_to_run"}}
        return {"_s": {n: _plain(getattr(v, n)) for n in dir(v)}}
    if k == "list" or k == "tuple":
        return [_plain(x) for x in v]
    if k == "dict":
        if "_rbs_target" in v:
            return {"_t": v["_rbs_target"]}
        return {str(a): _plain(b) for a, b in v.items()}
    if k == "function" or k == "builtin_function_or_method":
        fail("a function cannot be stored in a provider or passed to an action")
    return v

def _hydrate(v):
    k = type(v)
    if k == "list":
        return [_hydrate(x) for x in v]
    if k != "dict":
        return v
    if "_f" in v:
        return _file(v)
    if "_d" in v:
        return _mkdepset([_hydrate(x) for x in v["_d"]])
    if "_r" in v:
        return _mkrunfiles([_hydrate(x) for x in v["_r"]])
    if "_s" in v:
        return struct(**{a: _hydrate(b) for a, b in v["_s"].items()})
    if "_t" in v:
        t = {"_rbs_target": v["_t"], "label": v["_t"]}
        for key, fields in v["p"].items():
            ctor = _PROVIDERS.get(key)
            if ctor != None:
                t[ctor] = _hydrate_provider(key, fields)
        return t
    return {a: _hydrate(b) for a, b in v.items()}

def _hydrate_provider(key, fields):
    if key == "DefaultInfo":
        return DefaultInfo(files = _hydrate(fields["files"]), runfiles = _hydrate(fields["default_runfiles"]), executable = _hydrate(fields["executable"]))
    return struct(_rbs_provider = key, **{a: _hydrate(b) for a, b in fields.items()})

def _args_obj():
    items = []
    def _fmt(x, fmt):
        s = x.path if _kind(x) == "file" else str(x)
        return fmt.replace("%s", s) if fmt else s
    def _flat(values):
        if _kind(values) == "depset":
            return values.to_list()
        return values
    def add(arg_name_or_value, value = None, format = None):
        if value == None:
            items.append(_fmt(arg_name_or_value, format))
        else:
            items.append(str(arg_name_or_value))
            items.append(_fmt(value, format))
        return a
    def add_all(arg_name_or_values, values = None, format_each = None, before_each = None, omit_if_empty = True, uniquify = False, map_each = None, terminate_with = None):
        vals = arg_name_or_values if values == None else values
        vals = [map_each(x) for x in _flat(vals)] if map_each else _flat(vals)
        if values != None and (vals or not omit_if_empty):
            items.append(str(arg_name_or_values))
        for x in vals:
            if before_each:
                items.append(before_each)
            items.append(_fmt(x, format_each))
        if terminate_with:
            items.append(terminate_with)
        return a
    def add_joined(arg_name_or_values, values = None, join_with = " ", format_each = None, format_joined = None, omit_if_empty = True, map_each = None):
        vals = arg_name_or_values if values == None else values
        vals = [map_each(x) for x in _flat(vals)] if map_each else _flat(vals)
        if not vals and omit_if_empty:
            return a
        if values != None:
            items.append(str(arg_name_or_values))
        joined = join_with.join([_fmt(x, format_each) for x in vals])
        items.append(format_joined.replace("%s", joined) if format_joined else joined)
        return a
    def use_param_file(param_file_arg, use_always = False):
        return a
    def set_param_file_format(format):
        return a
    a = struct(_rbs_kind = "args", _items = items, add = add, add_all = add_all, add_joined = add_joined, use_param_file = use_param_file, set_param_file_format = set_param_file_format)
    return a

def _arguments(arguments):
    out = []
    for x in arguments:
        k = _kind(x)
        if k == "args":
            out.extend(x._items)
        elif k == "file":
            out.append(x.path)
        else:
            out.append(str(x))
    return out

def _mkctx(d):
    def declare_file(filename, sibling = None):
        return _file(_rbs_declare(filename = filename, sibling = _plain(sibling)))
    def declare_directory(filename, sibling = None):
        fail("ctx.actions.declare_directory is not supported yet; declare each file with declare_file")
    def run(outputs, inputs = [], executable = None, arguments = [], mnemonic = None, progress_message = None, env = None, tools = [], use_default_shell_env = False, execution_requirements = None, input_manifests = None, resource_set = None, toolchain = None):
        _rbs_action(kind = "run", outputs = _plain(outputs), inputs = _plain(inputs), executable = _plain(executable), arguments = _arguments(arguments), mnemonic = mnemonic or "Action", progress_message = progress_message or "", env = env or {}, tools = _plain(tools))
    def run_shell(outputs, command, inputs = [], arguments = [], mnemonic = None, progress_message = None, env = None, tools = [], use_default_shell_env = False, execution_requirements = None, input_manifests = None, resource_set = None, toolchain = None, _executable_outputs = None):
        _rbs_action(kind = "shell", outputs = _plain(outputs), inputs = _plain(inputs), command = command, arguments = _arguments(arguments), mnemonic = mnemonic or "Action", progress_message = progress_message or "", env = env or {}, tools = _plain(tools), executable_outputs = _plain(_executable_outputs or []))
    def write(output, content, is_executable = False):
        if _kind(content) == "args":
            content = "\n".join(content._items) + "\n"
        _rbs_action(kind = "write", outputs = [_plain(output)], content = content, is_executable = is_executable)
    def symlink(output, target_file = None, target_path = None, is_executable = False, progress_message = None):
        if target_file == None:
            fail("ctx.actions.symlink needs target_file")
        _rbs_action(kind = "copy", outputs = [_plain(output)], inputs = [_plain(target_file)], is_executable = is_executable)
    def expand_location(input, targets = []):
        return _rbs_expand(text = input, vars = {}, targets = _plain(targets), attribute = "")
    def expand_make_variables(attribute_name, command, additional_substitutions):
        return _rbs_expand(text = command, vars = additional_substitutions, targets = [], attribute = attribute_name)
    actions = struct(
        declare_file = declare_file, declare_directory = declare_directory, run = run,
        run_shell = run_shell, write = write, symlink = symlink, args = _args_obj,
    )
    lab = d["label"]
    return struct(
        label = struct(name = lab["name"], package = lab["package"], workspace_name = lab["repo"], workspace_root = "", repo_name = lab["repo"]),
        attr = struct(**{k: _hydrate(v) for k, v in d["attr"].items()}),
        files = struct(**{k: _hydrate(v) for k, v in d["files"].items()}),
        file = struct(**{k: _hydrate(v) for k, v in d["file"].items()}),
        executable = struct(**{k: _hydrate(v) for k, v in d["executable"].items()}),
        outputs = struct(**{k: _hydrate(v) for k, v in d["outputs"].items()}),
        actions = actions,
        runfiles = _runfiles,
        bin_dir = struct(path = d["bin_dir"]),
        genfiles_dir = struct(path = d["bin_dir"]),
        workspace_name = d["workspace_name"],
        build_file_path = d["build_file_path"],
        var = d["var"],
        expand_location = expand_location,
        expand_make_variables = expand_make_variables,
    )

def rbs_call_impl(rid, data):
    ret = _RULES[rid](_mkctx(data))
    if ret == None:
        return []
    if type(ret) != "list" and type(ret) != "tuple":
        ret = [ret]
    out = []
    for p in ret:
        if _kind(p) != "struct" or not hasattr(p, "_rbs_provider"):
            fail("a rule implementation must return a list of providers, got a %s" % type(p))
        out.append(_plain(p))
    return out
'''

# Loaded into each user `.rbs` module (after PRELUDE) and each BUILD file.
NATIVES = (
    "genrule",
    "filegroup",
    "sh_binary",
    "sh_test",
    "sh_library",
    "py_binary",
    "py_library",
    "py_test",
)
BUILTINS_MODULE = "@rbs//builtins.rbs"
BUILD_PRELUDE = f"load({BUILTINS_MODULE!r}, {', '.join(repr(n) for n in NATIVES)})\n"
RBS_PRELUDE = f"load({BUILTINS_MODULE!r}, 'native')\n"
