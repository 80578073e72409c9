// Small DOM helpers: elements are built node by node (never from HTML strings), so no API
// text is ever parsed as markup.

const SVG_NS = "http://www.w3.org/2000/svg";

/** h("div.card#id", {attrs / onclick}, ...children): an element. Text children are text nodes. */
export function h(spec, props, ...children) {
  return build(document.createElement(tagOf(spec)), spec, props, children);
}

/** The same for SVG elements. */
export function s(spec, props, ...children) {
  return build(document.createElementNS(SVG_NS, tagOf(spec)), spec, props, children);
}

function tagOf(spec) {
  return spec.split(/[.#]/)[0] || "div";
}

function build(el, spec, props, children) {
  for (const m of spec.matchAll(/([.#])([^.#]+)/g)) {
    if (m[1] === ".") el.classList.add(m[2]);
    else el.id = m[2];
  }
  if (props && (typeof props !== "object" || props instanceof Node || Array.isArray(props))) {
    children.unshift(props);
    props = null;
  }
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") for (const c of String(value).split(/\s+/).filter(Boolean)) el.classList.add(c);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "value" && "value" in el) el.value = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace an element's children. */
export function mount(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A timestamp as the browser's local time, with the ISO value as a tooltip. */
export function when(iso) {
  if (!iso) return h("span.muted", "—");
  const d = new Date(iso);
  return h("time", { datetime: iso, title: iso }, d.toLocaleString());
}

export function ago(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 90) return `${seconds.toFixed(1)} s`;
  if (seconds < 5400) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

export function stateBadge(state) {
  return h("span.badge", { class: `st-${state}` }, state);
}

export function json(value) {
  return h("pre.json", JSON.stringify(value, null, 2));
}

/**
 * The API's error body shown as it is: status, code, message, and the detail
 * object verbatim (four-eyes refusals name the rule there).
 */
export function errorBox(result) {
  const err = result && result.body && result.body.error;
  if (!err) {
    return h("div.error", { role: "alert" }, `HTTP ${result ? result.status : "?"}: `,
      result && result.text ? result.text : "no answer");
  }
  return h("div.error", { role: "alert", dataset: { code: err.code } },
    h("strong", `${result.status} ${err.code}`), " ", h("span.message", err.message),
    Object.keys(err.detail || {}).length ? json(err.detail) : null);
}

/** A labelled input for filter forms. */
export function field(label, input) {
  return h("label.field", h("span", label), input);
}

export function select(name, options, value) {
  return h("select", { name },
    options.map(([v, text]) => h("option", { value: v, selected: v === value ? "" : null }, text)));
}
