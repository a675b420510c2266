// The edit-lock of an admin change page (django_dlock.admin.EditLockMixin): renew it
// every third of its ttl while the page is open, release it when the page is left
// (not when the form is submitted: the save releases it), and turn the page
// read-only when the renewal answers that the lock was lost.
"use strict";
(function () {
    const field = document.querySelector("input[name=_dlock_edit_token]");
    if (!field) {
        return;
    }
    const form = field.form;
    const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
    // Text a user typed stays selectable (read-only); other controls are disabled.
    const TEXT = /^(text|number|email|url|tel|search|password|date|datetime-local|time)$/;
    let holding = true;
    let submitting = false;

    function body() {
        const data = new FormData();
        data.append("csrfmiddlewaretoken", csrf);
        data.append("token", field.value);
        return data;
    }

    function lose(message) {
        holding = false;
        clearInterval(timer);
        for (const control of form.elements) {
            if (control.type === "hidden") {
                continue;
            }
            if (control.tagName === "TEXTAREA" || (control.tagName === "INPUT" && TEXT.test(control.type))) {
                control.readOnly = true;
            } else {
                control.disabled = true;
            }
        }
        form.classList.add("dlock-edit-lost");
        for (const link of form.querySelectorAll(".submit-row a")) {
            link.style.display = "none"; // delete: not for a page that lost its lock either
        }
        const list = document.createElement("ul");
        list.className = "messagelist";
        const item = document.createElement("li");
        item.className = "error dlock-edit-lost-message";
        item.textContent = message;
        list.append(item);
        document.getElementById("content").before(list);
    }

    async function renew() {
        let answer;
        try {
            const response = await fetch(field.dataset.renewUrl, {
                method: "POST",
                body: body(),
                credentials: "same-origin",
            });
            if (!response.ok) {
                return; // a server error or a lost connection: try again next time
            }
            answer = await response.json();
        } catch (error) {
            return;
        }
        if (answer.state === "lost" && holding) {
            lose(answer.message);
        }
    }

    const timer = setInterval(renew, Number(field.dataset.renewEvery));
    form.addEventListener("submit", function (event) {
        if (holding) {
            submitting = true;
        } else {
            event.preventDefault();
        }
    });
    let released = false;
    window.addEventListener("pagehide", function () {
        if (holding && !submitting) {
            released = navigator.sendBeacon(field.dataset.releaseUrl, body());
        }
    });
    // Back to this page from the browser's history cache: its lock was released
    // when it was left, so load it again (which takes the lock, or shows who has it).
    window.addEventListener("pageshow", function (event) {
        if (event.persisted && released) {
            location.reload();
        }
    });
})();
