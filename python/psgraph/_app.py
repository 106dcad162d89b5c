"""tf.app.flags and tf.app.run as TF 1.x trainers use them: DEFINE_string / integer /
float / boolean, FLAGS (parsed from sys.argv by app.run, or on first read), --name=value,
--name value, --bool / --nobool."""
import sys


class _Flag:
    def __init__(self, name, default, help, parse):
        self.name, self.default, self.help, self.parse = name, default, help, parse
        self.value = default


class UnrecognizedFlagError(Exception):
    pass


def _parse_bool(v):
    if isinstance(v, bool):
        return v
    s = str(v).lower()
    if s in ("1", "true", "t", "yes", "y"):
        return True
    if s in ("0", "false", "f", "no", "n"):
        return False
    raise ValueError("not a boolean: %r" % v)


class _FlagValues:
    def __init__(self):
        object.__setattr__(self, "_flags", {})
        object.__setattr__(self, "_parsed", False)

    def _define(self, name, default, help, parse):
        if name in self._flags:
            raise ValueError("The flag '%s' is defined twice." % name)
        self._flags[name] = _Flag(name, default, help, parse)

    def __call__(self, argv, known_only=False):
        """Parses argv (argv[0] is the program); returns what is left, argv[0] first."""
        rest = [argv[0]] if argv else []
        i = 1
        while i < len(argv):
            a = argv[i]
            if a == "--":
                rest.extend(argv[i + 1:])
                break
            if not a.startswith("-") or a == "-":
                rest.append(a)
                i += 1
                continue
            body = a.lstrip("-")
            name, eq, value = body.partition("=")
            flag = self._flags.get(name)
            if flag is None and name.startswith("no") and name[2:] in self._flags \
                    and self._flags[name[2:]].parse is _parse_bool and not eq:
                self._flags[name[2:]].value = False
                i += 1
                continue
            if flag is None:
                if known_only:
                    rest.append(a)
                    i += 1
                    continue
                raise UnrecognizedFlagError("Unknown command line flag '%s'" % name)
            if not eq:
                if flag.parse is _parse_bool:
                    value = "true"
                else:
                    if i + 1 >= len(argv):
                        raise ValueError("Flag --%s needs a value" % name)
                    i += 1
                    value = argv[i]
            try:
                flag.value = flag.parse(value)
            except ValueError as e:
                raise ValueError("Illegal value for flag --%s: %s" % (name, e)) from None
            i += 1
        object.__setattr__(self, "_parsed", True)
        return rest

    def __getattr__(self, name):
        flags = object.__getattribute__(self, "_flags")
        if name not in flags:
            raise AttributeError(name)
        if not object.__getattribute__(self, "_parsed"):
            self(sys.argv, known_only=True)
        return flags[name].value

    def __setattr__(self, name, value):
        if name not in self._flags:
            raise AttributeError("no flag --%s" % name)
        self._flags[name].value = value

    def __contains__(self, name):
        return name in self._flags

    def flag_values_dict(self):
        return {n: f.value for n, f in self._flags.items()}

    def is_parsed(self):
        return self._parsed

    def mark_as_parsed(self):
        object.__setattr__(self, "_parsed", True)

    def reset(self):
        """Forgets every flag (for tests that define flags again)."""
        self._flags.clear()
        object.__setattr__(self, "_parsed", False)


FLAGS = _FlagValues()


def DEFINE_string(name, default, help, flag_values=FLAGS, **kw):
    flag_values._define(name, default, help, lambda v: None if v is None else str(v))


def DEFINE_integer(name, default, help, flag_values=FLAGS, lower_bound=None, upper_bound=None, **kw):
    def parse(v):
        n = int(v)
        if (lower_bound is not None and n < lower_bound) or (upper_bound is not None and n > upper_bound):
            raise ValueError("%d is outside [%s, %s]" % (n, lower_bound, upper_bound))
        return n
    flag_values._define(name, default, help, parse)


def DEFINE_float(name, default, help, flag_values=FLAGS, lower_bound=None, upper_bound=None, **kw):
    flag_values._define(name, default, help, float)


def DEFINE_boolean(name, default, help, flag_values=FLAGS, **kw):
    flag_values._define(name, default, help, _parse_bool)


DEFINE_bool = DEFINE_boolean


def DEFINE_list(name, default, help, flag_values=FLAGS, **kw):
    flag_values._define(name, default, help,
                        lambda v: v if isinstance(v, list) else [s for s in str(v).split(",") if s])


def DEFINE_enum(name, default, enum_values, help, flag_values=FLAGS, **kw):
    def parse(v):
        if v not in enum_values:
            raise ValueError("value should be one of <%s>" % "|".join(enum_values))
        return v
    flag_values._define(name, default, help, parse)


def run(main=None, argv=None):
    """Parses the flags from argv (sys.argv), calls main(remaining argv) and exits with its
    return value, as tf.app.run."""
    args = FLAGS(sys.argv if argv is None else argv)
    main = main or sys.modules["__main__"].main
    sys.exit(main(args))
