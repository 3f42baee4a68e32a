// The dashboard's own script (a file, so the Content-Security-Policy allows no inline script):
// the dead-letter list's "select all" box, and its resend form never submits itself (htmx's
// buttons send it).
document.addEventListener("DOMContentLoaded", function () {
  const all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("click", function () {
      for (const box of document.querySelectorAll("input[name=offset]")) {
        box.checked = all.checked;
      }
    });
  }
  const resend = document.getElementById("resend");
  if (resend) {
    resend.addEventListener("submit", function (event) { event.preventDefault(); });
  }
});
