import { allCommands, type CommandSpec, type OptionSpec } from './command-spec.js';

/**
 * Shell completion scripts for `awc` (bash, zsh, fish), made from the program's command
 * definitions (command-spec.ts) by `awc completion <shell>`. They are static: a TAB runs no
 * `awc`, so completing never starts Node, a daemon or a warm worker, and never waits on one.
 * They complete command names (nested: `awc snapshot import`), each command's options and
 * the global ones, the declared choices of options and arguments; files where a command takes a
 * path or value and declares no choices. Workspace and snapshot names are not completed (that
 * would run the CLI at each TAB). How to install them: docs/how-to/shell-completion.md.
 */
export const SHELLS = ['bash', 'zsh', 'fish'] as const;

/** A shell {@link completionScript} writes for. */
export type Shell = (typeof SHELLS)[number];

/** The completion script for `shell` of the program `root` describes (the program's name is the command completed). */
export function completionScript(shell: Shell, root: CommandSpec): string {
  const t = tables(root);
  if (shell === 'bash') return bashScript(root.name, t);
  if (shell === 'zsh') return zshScript(root.name, t);
  return fishScript(root.name, root, t);
}

/** What every script is built of, per command path (the path's words joined by one space; '' for the root). */
interface Tables {
  /** Every command's path with its spec. */
  commands: Array<{ key: string; spec: CommandSpec }>;
  /** The root's options (commander accepts them before and after a subcommand). */
  globals: OptionSpec[];
}

/** The tables of `root`. */
function tables(root: CommandSpec): Tables {
  return { commands: allCommands(root).map((spec) => ({ key: spec.path.join(' '), spec })), globals: root.options };
}

/** A command's own options, then the global ones it does not define itself (the root: its own). */
function optionsOf(spec: CommandSpec, globals: OptionSpec[]): OptionSpec[] {
  if (spec.path.length === 0) return spec.options;
  const own = new Set(spec.options.flatMap(flagsOf));
  return [...spec.options, ...globals.filter((g) => !flagsOf(g).some((f) => own.has(f)))];
}

/** The flags of an option (`-m`, `--message`). */
function flagsOf(o: OptionSpec): string[] {
  return [o.short, o.long].filter((f): f is string => f !== undefined);
}

/** `s` in single quotes for bash and zsh. */
function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** `s` in single quotes for fish (which escapes `\` and `'` inside them). */
function fishq(s: string): string {
  return `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

/** One line of a help text (descriptions are one line; a newline would end a shell word list). */
function oneLine(s: string): string {
  return s.replace(/\s+/g, ' ').trim();
}

/**
 * `case` branches (bash and zsh share the syntax) mapping `"<path>|<word>"` to the subcommand a
 * word names at that path (its name, or an alias's command).
 */
function subcommandCases(t: Tables, indent: string): string {
  return t.commands
    .flatMap(({ key, spec }) =>
      spec.subcommands.map((s) => `${indent}${[s.name, ...s.aliases].map((w) => shq(`${key}|${w}`)).join('|')}) REPLY=${shq(s.name)} ;;`),
    )
    .join('\n');
}

/**
 * `case` branches mapping `"<path>|<key>"` to the values to offer: key an option flag that
 * declares choices, or the index of a positional argument (0 for the first) that does.
 */
function valueCases(t: Tables, indent: string, emit: (words: string[]) => string): string {
  const lines: string[] = [];
  for (const { key, spec } of t.commands) {
    for (const o of optionsOf(spec, t.globals))
      for (const f of o.choices ? flagsOf(o) : []) lines.push(`${indent}${shq(`${key}|${f}`)}) ${emit(o.choices!)} ;;`);
    spec.args.forEach((a, i) => {
      if (a.choices) lines.push(`${indent}${shq(`${key}|${i}`)}) ${emit(a.choices)} ;;`);
    });
  }
  return lines.join('\n');
}

/** `case` branches mapping a path to the option flags there that take a value. */
function valuedCases(t: Tables, indent: string, emit: (words: string[]) => string): string {
  return t.commands
    .map(({ key, spec }) => {
      const valued = optionsOf(spec, t.globals)
        .filter((o) => o.takesValue)
        .flatMap(flagsOf);
      return `${indent}${shq(key)}) ${emit(valued)} ;;`;
    })
    .join('\n');
}

/** The bash script: `complete -F _awc awc` over case tables; `-o default` completes files where it offers nothing. */
function bashScript(name: string, t: Tables): string {
  const words = (ws: string[]) => `REPLY=${shq(ws.join(' '))}`;
  const subs = t.commands.map(({ key, spec }) => `    ${shq(key)}) ${words(spec.subcommands.map((s) => s.name))} ;;`);
  const opts = t.commands.map(({ key, spec }) => `    ${shq(key)}) ${words(optionsOf(spec, t.globals).flatMap(flagsOf))} ;;`);
  return `# bash completion for ${name}, generated from its command definitions by \`${name} completion bash\`.
# Load it with: source <(${name} completion bash)   (docs/how-to/shell-completion.md)
_awc_sub() { REPLY=''; case "$1|$2" in
${subcommandCases(t, '    ')}
  esac; }
_awc_subcommands() { REPLY=''; case "$1" in
${subs.join('\n')}
  esac; }
_awc_options() { REPLY=''; case "$1" in
${opts.join('\n')}
  esac; }
_awc_valued() { REPLY=''; case "$1" in
${valuedCases(t, '    ', words)}
  esac; }
_awc_values() { REPLY=''; case "$1|$2" in
${valueCases(t, '    ', words)}
  esac; }
_awc() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" cmdpath='' w opt='' npos=0 i REPLY
  COMPREPLY=()
  [[ "$cur" == '=' ]] && cur=''
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    [[ "$w" == '=' ]] && continue # bash splits --home=DIR into --home, =, DIR
    if [[ -n "$opt" ]]; then opt=''; continue; fi
    case "$w" in
      --*=*) continue ;;
      -*) _awc_valued "$cmdpath"; [[ " $REPLY " == *" $w "* ]] && opt="$w"; continue ;;
    esac
    _awc_sub "$cmdpath" "$w"
    if [[ -n "$REPLY" && $npos -eq 0 ]]; then cmdpath="\${cmdpath:+$cmdpath }$REPLY"; else npos=$((npos + 1)); fi
  done
  if [[ -n "$opt" ]]; then
    _awc_values "$cmdpath" "$opt"
  elif [[ "$cur" == -* ]]; then
    _awc_options "$cmdpath"
  elif [[ $npos -eq 0 ]]; then
    _awc_subcommands "$cmdpath"; w="$REPLY"; _awc_values "$cmdpath" 0; REPLY="$w $REPLY"
  else
    _awc_values "$cmdpath" "$npos"
  fi
  local IFS=$' \\t\\n'
  COMPREPLY=($(compgen -W "$REPLY" -- "$cur"))
}
complete -o default -F _awc ${name}
`;
}

/** `name:description` for zsh's `_describe` (a colon in the name escaped). */
function described(name: string, description: string): string {
  return shq(`${name.replace(/:/g, '\\:')}:${oneLine(description)}`);
}

/** The zsh script: a `#compdef` function that works from fpath (`_awc`) and when sourced (`compdef`). */
function zshScript(name: string, t: Tables): string {
  const list = (ws: string[]) => `reply=(${ws.join(' ')})`;
  const subs = t.commands.map(
    ({ key, spec }) => `    ${shq(key)}) ${list(spec.subcommands.map((s) => described(s.name, s.description)))} ;;`,
  );
  const opts = t.commands.map(
    ({ key, spec }) =>
      `    ${shq(key)}) ${list(optionsOf(spec, t.globals).flatMap((o) => flagsOf(o).map((f) => described(f, o.description))))} ;;`,
  );
  const words = (ws: string[]) => list(ws.map(shq));
  return `#compdef ${name}
# zsh completion for ${name}, generated from its command definitions by \`${name} completion zsh\`.
# Install: ${name} completion zsh > ~/.zfunc/_${name}, with ~/.zfunc in fpath (docs/how-to/shell-completion.md)
_awc_sub() { REPLY=''; case "$1|$2" in
${subcommandCases(t, '    ')}
  esac; }
_awc_subcommands() { reply=(); case "$1" in
${subs.join('\n')}
  esac; }
_awc_options() { reply=(); case "$1" in
${opts.join('\n')}
  esac; }
_awc_valued() { reply=(); case "$1" in
${valuedCases(t, '    ', words)}
  esac; }
_awc_values() { reply=(); case "$1|$2" in
${valueCases(t, '    ', words)}
  esac; }
_awc() {
  local cmdpath='' w opt='' REPLY
  local -i npos=0 i
  local -a reply
  for ((i = 2; i < CURRENT; i++)); do
    w=\${words[i]}
    if [[ -n $opt ]]; then opt=''; continue; fi
    case $w in
      --*=*) continue ;;
      -*) _awc_valued "$cmdpath"; (( \${reply[(Ie)$w]} )) && opt=$w; continue ;;
    esac
    _awc_sub "$cmdpath" "$w"
    if [[ -n $REPLY && $npos -eq 0 ]]; then cmdpath=\${cmdpath:+$cmdpath }$REPLY; else npos+=1; fi
  done
  if [[ -n $opt ]]; then
    _awc_values "$cmdpath" "$opt"; if (( $#reply )); then compadd -a reply; else _files; fi; return
  fi
  if [[ $PREFIX == -* ]]; then _awc_options "$cmdpath"; _describe -t options option reply; return; fi
  if (( npos == 0 )); then
    _awc_subcommands "$cmdpath"; if (( $#reply )); then _describe -t commands command reply; return; fi
  fi
  _awc_values "$cmdpath" "$npos"; if (( $#reply )); then compadd -a reply; else _files; fi
}
if [[ $funcstack[1] == _awc ]]; then _awc "$@"; else compdef _awc ${name}; fi
`;
}

/** The fish script: `complete -c awc` lines, each conditioned on the command path the line has reached. */
function fishScript(name: string, root: CommandSpec, t: Tables): string {
  const list = (ws: string[]) => `printf '%s\\n' ${ws.map(fishq).join(' ')}`;
  const lines: string[] = [];
  for (const o of t.globals) lines.push(fishOption(name, undefined, o));
  for (const { key, spec } of t.commands) {
    const at = `-n ${fishq(`__awc_at ${fishq(key)}`)}`;
    for (const s of spec.subcommands) lines.push(`complete -c ${name} ${at} -f -a ${fishq(s.name)} -d ${fishq(oneLine(s.description))}`);
    if (spec.subcommands.length > 0 || spec.args.length === 0) lines.push(`complete -c ${name} ${at} -f`);
    const choices = spec.args.find((a) => a.choices)?.choices;
    if (choices) lines.push(`complete -c ${name} ${at} -f -a ${fishq(choices.join(' '))}`);
    if (spec !== root) for (const o of spec.options) lines.push(fishOption(name, at, o));
  }
  return `# fish completion for ${name}, generated from its command definitions by \`${name} completion fish\`.
# Install: ${name} completion fish > ~/.config/fish/completions/${name}.fish   (docs/how-to/shell-completion.md)
function __awc_sub
    switch "$argv[1]|$argv[2]"
${fishCases(subcommandCases(t, ''))}
    end
end
function __awc_valued
    switch "$argv[1]"
${fishCases(valuedCases(t, '', list))}
    end
end
${FISH_STATE}
complete -c ${name} -e
${lines.join('\n')}
`;
}

/** bash-style `a|b) body ;;` branches as fish `case a b` blocks. */
function fishCases(branches: string): string {
  return branches
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => {
      const m = /^(.*?)\) (.*) ;;$/.exec(l)!;
      const pats = m[1]
        .split(/\|(?=')/)
        .map((p) => fishq(p.slice(1, -1).replace(/'\\''/g, "'")))
        .join(' ');
      const body = m[2].startsWith('REPLY=') ? `echo ${fishq(m[2].slice('REPLY='.length).slice(1, -1))}` : m[2];
      return `        case ${pats}\n            ${body}`;
    })
    .join('\n');
}

/** A fish `complete` line for one option (under condition `at`, or everywhere for a global one). */
function fishOption(name: string, at: string | undefined, o: OptionSpec): string {
  const parts = [`complete -c ${name}`];
  if (at) parts.push(at);
  if (o.short) parts.push(o.short.length === 2 ? `-s ${o.short.slice(1)}` : `-o ${o.short.slice(1)}`);
  if (o.long) parts.push(`-l ${o.long.slice(2)}`);
  if (o.choices) parts.push(`-x -a ${fishq(o.choices.join(' '))}`);
  else if (o.takesValue) parts.push('-r');
  parts.push(`-d ${fishq(oneLine(o.description))}`);
  return parts.join(' ');
}

/** fish functions that find the command path of the line being completed (computed once per line). */
const FISH_STATE = `function __awc_state
    set -l p ''
    set -l opt 0
    set -l npos 0
    for w in (commandline -opc)[2..-1]
        if test $opt = 1
            set opt 0
            continue
        end
        switch $w
            case '--*=*'
                continue
            case '-*'
                if contains -- $w (__awc_valued "$p")
                    set opt 1
                end
                continue
        end
        set -l sub (__awc_sub "$p" $w)
        if test -n "$sub" -a $npos = 0
            if test -z "$p"
                set p $sub
            else
                set p "$p $sub"
            end
        else
            set npos (math $npos + 1)
        end
    end
    echo $p
end
function __awc_at
    set -l line (commandline -opc | string join \\x1e)
    if test "$line" != "$__awc_line"; or not set -q __awc_path
        set -g __awc_line $line
        set -g __awc_path (__awc_state)
    end
    test "$__awc_path" = "$argv[1]"
end`;
