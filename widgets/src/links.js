// -- the file links of the conversation --------------------------------------------------------
function pageConfig() {
  try { return JSON.parse(document.getElementById("jupyter-config-data").textContent); } catch { return {}; }
}

export function openPath(path) {
  const cfg = pageConfig();
  const root = (cfg.serverRoot || cfg.rootUri || "").replace(/^file:\/\//, "").replace(/\/$/, "");
  if (root && path.startsWith(root + "/")) {
    const rel = path.slice(root.length + 1);
    const app = window.jupyterapp;
    if (app && app.commands) { app.commands.execute("docmanager:open", { path: rel }); return true; }
    const base = (cfg.baseUrl || "/").replace(/\/?$/, "/");
    window.open(base + "lab/tree/" + rel.split("/").map(encodeURIComponent).join("/"), "_blank", "noopener");
    return true;
  }
  return false;
}
